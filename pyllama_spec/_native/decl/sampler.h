/* llama.cpp's sampler chain. */
typedef struct llama_sampler_chain_params { bool no_perf; } llama_sampler_chain_params;
struct llama_sampler_chain_params llama_sampler_chain_default_params(void);
struct llama_sampler * llama_sampler_chain_init(struct llama_sampler_chain_params params);
void llama_sampler_chain_add(struct llama_sampler * chain, struct llama_sampler * smpl);
int32_t llama_sampler_chain_n(const struct llama_sampler * chain);
struct llama_sampler * llama_sampler_init_greedy(void);
struct llama_sampler * llama_sampler_init_dist(uint32_t seed);
struct llama_sampler * llama_sampler_init_top_k(int32_t k);
struct llama_sampler * llama_sampler_init_top_k_logprobs(int32_t k);  /* patch 0011 */
struct llama_sampler * llama_sampler_init_top_p(float p, size_t min_keep);
struct llama_sampler * llama_sampler_init_min_p(float p, size_t min_keep);
struct llama_sampler * llama_sampler_init_temp(float t);
const char * llama_sampler_name(const struct llama_sampler * smpl);
void llama_sampler_accept(struct llama_sampler * smpl, llama_token token);
void llama_sampler_reset(struct llama_sampler * smpl);
void llama_sampler_free(struct llama_sampler * smpl);
llama_token llama_sampler_sample(struct llama_sampler * smpl, struct llama_context * ctx, int32_t idx);

/* Backend sampling [EXPERIMENTAL in llama.cpp]: a sampler chain attached to a context's sequence
   runs inside the decode graph; only the sampled token (and optionally probabilities) comes back. */
bool llama_set_sampler(struct llama_context * ctx, llama_seq_id seq_id, struct llama_sampler * smpl);
llama_token llama_get_sampled_token_ith(struct llama_context * ctx, int32_t i);
/* What a chain without a final draw leaves per output row, e.g. top-k alone (llama.cpp's DFlash draft
   chain, common/speculative.cpp): the kept candidates' ids and logits (NULL / 0 when none were kept). */
float *  llama_get_sampled_logits_ith(struct llama_context * ctx, int32_t i);
uint32_t llama_get_sampled_logits_count_ith(struct llama_context * ctx, int32_t i);
llama_token * llama_get_sampled_candidates_ith(struct llama_context * ctx, int32_t i);
uint32_t llama_get_sampled_candidates_count_ith(struct llama_context * ctx, int32_t i);

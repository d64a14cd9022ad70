/* extern "C" entry points over llama.cpp's C++-linkage staging API (src/llama-ext.h). */
#pragma once
#include "llama.h"
#ifdef __cplusplus
extern "C" {
#endif

struct pyls_mem_row { char name[64]; size_t model; size_t context; size_t compute; };

void pyls_set_embeddings_layer_inp(struct llama_context * ctx, uint32_t lid, bool value);
float * pyls_get_embeddings_layer_inp(struct llama_context * ctx, uint32_t lid);
void pyls_set_embeddings_nextn(struct llama_context * ctx, bool value, bool masked);
float * pyls_get_embeddings_nextn(struct llama_context * ctx);
struct llama_context * pyls_get_ctx_other(struct llama_context * ctx);
uint32_t pyls_output_buffer_reallocs(const struct llama_context * ctx);
void pyls_release_replaced_outputs(struct llama_context * ctx);
int32_t pyls_model_dflash_selector_top_k(const struct llama_model * model);
const int32_t * pyls_model_target_layer_ids(const struct llama_model * model);
uint32_t pyls_model_target_layer_ids_n(const struct llama_model * model);
uint32_t pyls_model_get_tok_embd(const struct llama_model * model, float * out);
int32_t pyls_memory_breakdown(const struct llama_context * ctx, struct pyls_mem_row * rows, int32_t n_rows);
int32_t pyls_batch_ext_add_embd_rows(struct llama_batch_ext * batch, llama_seq_id seq_id, const float * data,
                                     int32_t n_rows, int32_t n_embd, const llama_pos * pos, int32_t n_pos_per_row,
                                     bool output);
int32_t pyls_batch_ext_add_tokens(struct llama_batch_ext * batch, llama_seq_id seq_id, const llama_token * tokens,
                                  int32_t n_tokens, const llama_pos * pos, const int8_t * output);
float * pyls_get_embeddings_nextn_ith(struct llama_context * ctx, int32_t i);
void pyls_set_nextn_layer_offset(struct llama_context * ctx, int32_t offset);
int32_t pyls_batch_ext_add_token_rows(struct llama_batch_ext * batch, llama_seq_id seq_id, const llama_token * tokens,
                                      const float * embd, int32_t n_rows, int32_t n_embd, const llama_pos * pos,
                                      const int8_t * output);
bool pyls_dflash_set_inject(struct llama_context * ctx, const float * rows, int32_t n_rows);
const char * pyls_llama_cpp_commit(void);
int32_t pyls_rpc_add_server(const char * endpoint);
const char * pyls_model_dev_output(const struct llama_model * model);
// the backend-sampled tokens of output rows idx[0..n) (batch indices, as llama_get_sampled_token_ith takes) into
// out, after one synchronization: llama_get_sampled_token_ith synchronizes the backends on every call (a stream
// sync a row on a GPU). 0, or -1 on an exception.
int32_t pyls_get_sampled_tokens(struct llama_context * ctx, const int32_t * idx, int32_t n, int32_t * out);
// the candidate ids and logits a backend chain kept for output row idx (a batch index), after one synchronization
// (the four llama_get_sampled_*_ith getters sync once each): *n_ids / *n_logits their counts (0: none), the
// pointers as those getters return them. 0, or -1 on an exception.
int32_t pyls_get_sampled_candidates(struct llama_context * ctx, int32_t idx, const int32_t ** ids, uint32_t * n_ids,
                                    const float ** logits, uint32_t * n_logits);

#ifdef __cplusplus
}
#endif

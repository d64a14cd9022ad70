/* Token batches (llama_batch + llama_decode) and extended batches (llama_batch_ext + llama_process). */
typedef struct llama_batch {
    int32_t n_tokens;
    llama_token  * token;
    float        * embd;
    llama_pos    * pos;
    int32_t      * n_seq_id;
    llama_seq_id ** seq_id;
    int8_t       * logits;
} llama_batch;

struct llama_embd { const float * data; size_t n_rows; size_t n_embd; };

struct llama_batch llama_batch_init(int32_t n_tokens, int32_t embd, int32_t n_seq_max);
void llama_batch_free(struct llama_batch batch);
int32_t llama_decode(struct llama_context * ctx, struct llama_batch batch);

struct llama_batch_ext * llama_batch_ext_init(struct llama_context * ctx);
void llama_batch_ext_free(struct llama_batch_ext * batch);
void llama_batch_ext_clear(struct llama_batch_ext * batch);
int32_t llama_batch_ext_add_token(struct llama_batch_ext * batch, llama_seq_id seq_id, llama_token id);
int32_t llama_batch_ext_add_embd(struct llama_batch_ext * batch, llama_seq_id seq_id, struct llama_embd embd);
bool llama_batch_ext_set_output_logits(struct llama_batch_ext * batch, int32_t idx, bool value);
bool llama_batch_ext_set_pos(struct llama_batch_ext * batch, int32_t idx, const llama_pos * pos);
int32_t llama_process(struct llama_context * ctx, enum llama_process_type type, struct llama_batch_ext * batch);

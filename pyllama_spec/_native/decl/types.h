/* Opaque handles, scalar typedefs and the enums we use (values filled in by the compiler). */
struct llama_vocab;
struct llama_model;
struct llama_context;
struct llama_sampler;
struct llama_batch_ext;
typedef struct llama_memory_i * llama_memory_t;
typedef int32_t llama_pos;
typedef int32_t llama_token;
typedef int32_t llama_seq_id;
typedef struct ggml_backend_device * ggml_backend_dev_t;
typedef struct ggml_backend_buffer_type * ggml_backend_buffer_type_t;
typedef struct ggml_backend_reg * ggml_backend_reg_t;

#define LLAMA_DEFAULT_SEED ...
#define LLAMA_TOKEN_NULL ...

enum ggml_type { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,
                 GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_BF16, ... };
enum ggml_log_level { GGML_LOG_LEVEL_NONE, GGML_LOG_LEVEL_DEBUG, GGML_LOG_LEVEL_INFO,
                      GGML_LOG_LEVEL_WARN, GGML_LOG_LEVEL_ERROR, GGML_LOG_LEVEL_CONT, ... };
enum llama_flash_attn_type { LLAMA_FLASH_ATTN_TYPE_AUTO, LLAMA_FLASH_ATTN_TYPE_DISABLED,
                             LLAMA_FLASH_ATTN_TYPE_ENABLED, ... };
enum llama_split_mode { LLAMA_SPLIT_MODE_NONE, LLAMA_SPLIT_MODE_LAYER, LLAMA_SPLIT_MODE_ROW, ... };
enum llama_pooling_type { LLAMA_POOLING_TYPE_UNSPECIFIED, LLAMA_POOLING_TYPE_NONE, ... };
enum llama_rope_type { LLAMA_ROPE_TYPE_NONE, LLAMA_ROPE_TYPE_NORM, LLAMA_ROPE_TYPE_NEOX,
                       LLAMA_ROPE_TYPE_MROPE, ... };
enum llama_load_mode { LLAMA_LOAD_MODE_AUTO, LLAMA_LOAD_MODE_NONE, LLAMA_LOAD_MODE_MMAP, ... };
enum llama_process_type { LLAMA_PROCESS_TYPE_ENCODE, LLAMA_PROCESS_TYPE_DECODE, ... };
enum llama_context_type { LLAMA_CONTEXT_TYPE_DEFAULT, LLAMA_CONTEXT_TYPE_MTP, ... };
enum llama_vocab_type { LLAMA_VOCAB_TYPE_NONE, LLAMA_VOCAB_TYPE_SPM, LLAMA_VOCAB_TYPE_BPE, ... };
enum llama_token_attr { LLAMA_TOKEN_ATTR_CONTROL, ... };
enum ggml_backend_dev_type { GGML_BACKEND_DEVICE_TYPE_CPU, GGML_BACKEND_DEVICE_TYPE_GPU,
                             GGML_BACKEND_DEVICE_TYPE_IGPU, GGML_BACKEND_DEVICE_TYPE_ACCEL, ... };

typedef void (*ggml_log_callback)(enum ggml_log_level level, const char * text, void * user_data);
typedef bool (*llama_progress_callback)(float progress, void * user_data);

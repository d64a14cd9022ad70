/* Process-wide set-up, logging and devices. */
void llama_backend_init(void);
void llama_log_set(ggml_log_callback log_callback, void * user_data);
const char * llama_print_system_info(void);
bool llama_supports_gpu_offload(void);
bool llama_supports_mmap(void);
size_t llama_max_devices(void);
int64_t llama_time_us(void);

size_t ggml_backend_dev_count(void);
ggml_backend_dev_t ggml_backend_dev_get(size_t index);
const char * ggml_backend_dev_name(ggml_backend_dev_t device);
const char * ggml_backend_dev_description(ggml_backend_dev_t device);
void ggml_backend_dev_memory(ggml_backend_dev_t device, size_t * free, size_t * total);
enum ggml_backend_dev_type ggml_backend_dev_type(ggml_backend_dev_t device);
ggml_backend_reg_t ggml_backend_dev_backend_reg(ggml_backend_dev_t device);
const char * ggml_backend_reg_name(ggml_backend_reg_t reg);
bool llama_supports_rpc(void);

extern "Python" void _pyls_log_callback(enum ggml_log_level, const char *, void *);
extern "Python" bool _pyls_progress_callback(float, void *);

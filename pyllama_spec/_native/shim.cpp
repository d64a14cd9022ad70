// extern "C" shim: llama-ext.h declares these with C++ linkage, so cffi cannot reach them directly.
// Every entry point catches C++ exceptions: one escaping into the cffi trampoline would terminate Python.
#include "shim.h"
#include "llama-ext.h"
#include "llama-model.h"
#include "llama-context.h"
#include "ggml-backend.h"

#include <algorithm>
#include <cstring>

#ifndef PYLS_LLAMA_CPP_COMMIT
#define PYLS_LLAMA_CPP_COMMIT "unknown"
#endif

extern "C" {

void pyls_set_embeddings_layer_inp(llama_context * ctx, uint32_t lid, bool value) {
    llama_set_embeddings_layer_inp(ctx, lid, value);
}

float * pyls_get_embeddings_layer_inp(llama_context * ctx, uint32_t lid) {
    return llama_get_embeddings_layer_inp(ctx, lid);
}

void pyls_set_embeddings_nextn(llama_context * ctx, bool value, bool masked) {
    llama_set_embeddings_nextn(ctx, value, masked);
}

float * pyls_get_embeddings_nextn(llama_context * ctx) {
    return llama_get_embeddings_nextn(ctx);
}

llama_context * pyls_get_ctx_other(llama_context * ctx) {
    return llama_get_ctx_other(ctx);
}

uint32_t pyls_output_buffer_reallocs(const llama_context * ctx) {
    return llama_output_buffer_reallocs(ctx);
}

void pyls_release_replaced_outputs(llama_context * ctx) {
    llama_release_replaced_outputs(ctx);
}

int32_t pyls_model_dflash_selector_top_k(const llama_model * model) {
    return llama_model_dflash_selector_top_k(model);
}

const int32_t * pyls_model_target_layer_ids(const llama_model * model) {
    return llama_model_target_layer_ids(model);
}

uint32_t pyls_model_target_layer_ids_n(const llama_model * model) {
    return llama_model_target_layer_ids_n(model);
}

uint32_t pyls_model_get_tok_embd(const llama_model * model, float * out) {
    try {
        return llama_model_get_tok_embd(model, out);
    } catch (...) {
        return 0;
    }
}

int32_t pyls_memory_breakdown(const llama_context * ctx, pyls_mem_row * rows, int32_t n_rows) {
    try {
        const llama_memory_breakdown mb = llama_get_memory_breakdown(ctx);
        int32_t i = 0;
        for (const auto & kv : mb) {
            if (i < n_rows) {
                const char * name = kv.first ? ggml_backend_buft_name(kv.first) : "unknown";
                std::strncpy(rows[i].name, name, sizeof(rows[i].name) - 1);
                rows[i].name[sizeof(rows[i].name) - 1] = '\0';
                rows[i].model   = kv.second.model;
                rows[i].context = kv.second.context;
                rows[i].compute = kv.second.compute;
            }
            ++i;
        }
        return i;
    } catch (...) {
        return -1;
    }
}

// One call per batch instead of three per row: the injection of target features runs every step.
int32_t pyls_batch_ext_add_embd_rows(llama_batch_ext * batch, llama_seq_id seq_id, const float * data,
                                     int32_t n_rows, int32_t n_embd, const llama_pos * pos, int32_t n_pos_per_row,
                                     bool output) {
    for (int32_t i = 0; i < n_rows; ++i) {
        llama_embd e = { data + (size_t) i * n_embd, 1, (size_t) n_embd };
        const int32_t idx = llama_batch_ext_add_embd(batch, seq_id, e);
        if (idx < 0) {
            return idx;
        }
        if (!llama_batch_ext_set_pos(batch, idx, pos + (size_t) i * n_pos_per_row)) {
            return -4;
        }
        if (output && !llama_batch_ext_set_output_logits(batch, idx, true)) {
            return -5;
        }
    }
    return n_rows;
}

int32_t pyls_batch_ext_add_tokens(llama_batch_ext * batch, llama_seq_id seq_id, const llama_token * tokens,
                                  int32_t n_tokens, const llama_pos * pos, const int8_t * output) {
    for (int32_t i = 0; i < n_tokens; ++i) {
        const int32_t idx = llama_batch_ext_add_token(batch, seq_id, tokens[i]);
        if (idx < 0) {
            return idx;
        }
        llama_pos p[4] = { pos[i], pos[i], pos[i], 0 };
        if (!llama_batch_ext_set_pos(batch, idx, p)) {
            return -4;
        }
        if (output && output[i] && !llama_batch_ext_set_output_logits(batch, idx, true)) {
            return -5;
        }
    }
    return n_tokens;
}

float * pyls_get_embeddings_nextn_ith(llama_context * ctx, int32_t i) {
    // llama.cpp throws (caught inside, NULL returned) for a row without next-n embeddings
    try {
        return llama_get_embeddings_nextn_ith(ctx, i);
    } catch (...) {
        return nullptr;
    }
}

void pyls_set_nextn_layer_offset(llama_context * ctx, int32_t offset) {
    llama_set_nextn_layer_offset(ctx, offset);
}

// Rows that carry both a token id and an embedding (EAGLE-3's g, MTP's target hidden state), as
// common_batch::add + set_embd build them; embd == NULL adds plain tokens. One call per batch.
int32_t pyls_batch_ext_add_token_rows(llama_batch_ext * batch, llama_seq_id seq_id, const llama_token * tokens,
                                      const float * embd, int32_t n_rows, int32_t n_embd, const llama_pos * pos,
                                      const int8_t * output) {
    for (int32_t i = 0; i < n_rows; ++i) {
        const int32_t idx = llama_batch_ext_add_token(batch, seq_id, tokens[i]);
        if (idx < 0) {
            return idx;
        }
        llama_pos p[4] = { pos[i], 0, 0, 0 };
        if (!llama_batch_ext_set_pos(batch, idx, p)) {
            return -4;
        }
        if (embd != nullptr) {
            llama_embd e = { embd + (size_t) i * n_embd, 1, (size_t) n_embd };
            if (!llama_batch_ext_set_embd_token(batch, idx, e)) {
                return -6;
            }
        }
        if (output && output[i] && !llama_batch_ext_set_output_logits(batch, idx, true)) {
            return -5;
        }
    }
    return n_rows;
}

// vendor/patches/0002-dflash-fused-inject: stage target features for the next (fused) draft decode
bool pyls_dflash_set_inject(llama_context * ctx, const float * rows, int32_t n_rows) {
    try {
        return llama_dflash_set_inject(ctx, rows, n_rows);
    } catch (...) {
        return false;
    }
}

const char * pyls_llama_cpp_commit(void) {
    return PYLS_LLAMA_CPP_COMMIT;
}

// The device holding the model's output head (llama_model::dev_output, C++ linkage): a DFlash
// drafter borrows that tensor, and a backend can only compute with tensors in its own device's
// buffers (ggml_backend_sched aborts otherwise), so its drafter must run there too.
const char * pyls_model_dev_output(const llama_model * model) {
    try {
        ggml_backend_dev_t dev = model->dev_output();
        return dev ? ggml_backend_dev_name(dev) : "";
    } catch (...) {
        return "";
    }
}

// Register the devices of an RPC server (common/arg.cpp add_rpc_devices does the same for --rpc).
// The RPC backend is looked up at run time, so this builds with or without GGML_RPC.
// Returns the number of devices the server lends, -1 without an RPC backend, -2 when the server
// lends none, -3 on an exception. The caller must have checked that the server answers: ggml-rpc
// aborts the process when it cannot connect or the handshake fails.
int32_t pyls_rpc_add_server(const char * endpoint) {
    try {
        ggml_backend_reg_t rpc = ggml_backend_reg_by_name("RPC");
        if (rpc == nullptr) {
            return -1;
        }
        typedef ggml_backend_reg_t (*add_server_t)(const char *);
        auto add_server = (add_server_t) ggml_backend_reg_get_proc_address(rpc, "ggml_backend_rpc_add_server");
        if (add_server == nullptr) {
            return -1;
        }
        ggml_backend_reg_t reg = add_server(endpoint);
        if (reg == nullptr) {
            return -2;
        }
        const size_t n_before = ggml_backend_dev_count();
        ggml_backend_register(reg);  // registering twice would list its devices twice: Python adds each endpoint once
        return (int32_t) (ggml_backend_dev_count() - n_before);
    } catch (...) {
        return -3;
    }
}

int32_t pyls_get_sampled_candidates(llama_context * ctx, int32_t idx, const int32_t ** ids, uint32_t * n_ids,
                                    const float ** logits, uint32_t * n_logits) {
    try {
        ctx->synchronize();  // once (each llama_get_sampled_*_ith getter would sync again)
        *n_ids = (uint32_t) ctx->get_sampled_candidates_count(idx);
        *n_logits = (uint32_t) ctx->get_sampled_logits_count(idx);
        *ids = ctx->get_sampled_candidates_ith(idx);
        *logits = ctx->get_sampled_logits_ith(idx);
        return 0;
    } catch (...) {
        return -1;
    }
}

int32_t pyls_get_sampled_tokens(llama_context * ctx, const int32_t * idx, int32_t n, int32_t * out) {
    try {
        ctx->synchronize();  // once for all rows (each llama_get_sampled_token_ith call would sync again)
        for (int32_t j = 0; j < n; ++j) {
            out[j] = ctx->get_sampled_token_ith(idx[j]);
        }
        return 0;
    } catch (...) {
        return -1;
    }
}

}

/* Struct sizes for bindings (python/attn mirrors the public structs with
 * ctypes and checks its layout against these at import). */
#include "attn_cache.h"
#include "attn_layers.h"
#include "attn_pretrained.h"
#include "attn_tokenizer.h"
#include "attn_train.h"
#include "attn_viz.h"
#include "internal.h"
#include "attn_transformer.h"

#include <string.h>

size_t attn_sizeof(const char *type_name) {
    if (!type_name) return 0;
    static const struct {
        const char *name;
        size_t size;
    } sizes[] = {
        {"attn_tensor", sizeof(attn_tensor)},
        {"attn_mask", sizeof(attn_mask)},
        {"attn_sdpa_opts", sizeof(attn_sdpa_opts)},
        {"attn_rope", sizeof(attn_rope)},
        {"attn_llama_config", sizeof(attn_llama_config)},
        {"attn_llama_gen_opts", sizeof(attn_llama_gen_opts)},
        {"attn_npy", sizeof(attn_npy)},
        {"attn_heatmap_opts", sizeof(attn_heatmap_opts)},
        {"attn_stats", sizeof(attn_stats)},
        {"attn_term_opts", sizeof(attn_term_opts)},
        {"attn_compare_result", sizeof(attn_compare_result)},
        {"attn_html_opts", sizeof(attn_html_opts)},
        {"attn_panel", sizeof(attn_panel)},
        {"attn_param_slice", sizeof(attn_param_slice)},
        {"attn_additive_config", sizeof(attn_additive_config)},
        {"attn_mha_config", sizeof(attn_mha_config)},
        {"attn_encoder_config", sizeof(attn_encoder_config)},
        {"attn_kv_cache_config", sizeof(attn_kv_cache_config)},
        {"attn_decoder_config", sizeof(attn_decoder_config)},
        {"attn_transformer_config", sizeof(attn_transformer_config)},
        {"attn_generate_opts", sizeof(attn_generate_opts)},
        {"attn_gen_task", sizeof(attn_gen_task)},
        {"attn_gen_eval_result", sizeof(attn_gen_eval_result)},
        {"attn_bpe_vocab", sizeof(attn_bpe_vocab)},
        {"attn_bpe_stream", sizeof(attn_bpe_stream)},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (strcmp(sizes[i].name, type_name) == 0) return sizes[i].size;
    return 0;
}

/* attn_sizeof: the sizes bindings check their mirrored structs against. */
#include "attn.h"
#include "attn_layers.h"
#include "attn_tokenizer.h"
#include "attn_train.h"
#include "attn_viz.h"
#include "check.h"

int main(void) {
    CHECK(attn_sizeof("attn_tensor") == sizeof(attn_tensor));
    CHECK(attn_sizeof("attn_mask") == sizeof(attn_mask));
    CHECK(attn_sizeof("attn_sdpa_opts") == sizeof(attn_sdpa_opts));
    CHECK(attn_sizeof("attn_npy") == sizeof(attn_npy));
    CHECK(attn_sizeof("attn_heatmap_opts") == sizeof(attn_heatmap_opts));
    CHECK(attn_sizeof("attn_stats") == sizeof(attn_stats));
    CHECK(attn_sizeof("attn_term_opts") == sizeof(attn_term_opts));
    CHECK(attn_sizeof("attn_compare_result") == sizeof(attn_compare_result));
    CHECK(attn_sizeof("attn_html_opts") == sizeof(attn_html_opts));
    CHECK(attn_sizeof("attn_panel") == sizeof(attn_panel));
    CHECK(attn_sizeof("attn_param_slice") == sizeof(attn_param_slice));
    CHECK(attn_sizeof("attn_additive_config") == sizeof(attn_additive_config));
    CHECK(attn_sizeof("attn_mha_config") == sizeof(attn_mha_config));
    CHECK(attn_sizeof("attn_encoder_config") == sizeof(attn_encoder_config));
    CHECK(attn_sizeof("attn_bpe_vocab") == sizeof(attn_bpe_vocab));
    CHECK(attn_sizeof("attn_bpe_stream") == sizeof(attn_bpe_stream));
    /* unknown names and NULL are 0, not a crash */
    CHECK(attn_sizeof("attn_nothing") == 0);
    CHECK(attn_sizeof("") == 0);
    CHECK(attn_sizeof(NULL) == 0);
    return check_done("test_abi");
}

/* Llama-family models from GGUF files (tests/data/llama_gguf/, written by
 * tests/make_llama_gguf_fixtures.py with the gguf package as llama.cpp's
 * converter lays a checkpoint out): the F32 file of the llama_gqa folder
 * gives the folder's logits bit for bit (its Q and K rows un-permuted), a
 * Q8_0 file keeps its quantized rows in the f32 weights' order, a file
 * without output.weight is tied, and files that must be refused are
 * (another architecture, a missing tensor, a wrong shape, a tensor type
 * attn does not read, a rope scaling it does not know, a cut file). */
#include "attn_gguf.h"
#include "attn_pretrained.h"
#include "attn_transformer.h"
#include "check.h"
#include "../src/kernels/gemv.h"
#include "../src/models/llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void path_of(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/tests/data/llama_gguf/%s", ATTN_SOURCE_DIR, name);
}

static attn_llama *load(const char *name) {
    char path[2048];
    path_of(path, sizeof path, name);
    attn_llama *m = NULL;
    CHECK_STATUS(attn_llama_load(path, &m), ATTN_OK);
    return m;
}

/* The same model from the folder and from its F32 GGUF file. */
static void same_as_folder(void) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%s/tests/data/llama/llama_gqa", ATTN_SOURCE_DIR);
    attn_llama *a = NULL, *b = load("llama_gqa.gguf");
    CHECK_STATUS(attn_llama_load(dir, &a), ATTN_OK);
    if (!a || !b) {
        attn_llama_free(a);
        attn_llama_free(b);
        return;
    }
    const attn_llama_config *ca = attn_llama_get_config(a),
                            *cb = attn_llama_get_config(b);
    CHECK(ca->num_layers == cb->num_layers &&
          ca->hidden_size == cb->hidden_size &&
          ca->num_heads == cb->num_heads &&
          ca->num_kv_heads == cb->num_kv_heads &&
          ca->intermediate_size == cb->intermediate_size &&
          ca->vocab_size == cb->vocab_size &&
          ca->max_position == cb->max_position &&
          ca->rope.theta == cb->rope.theta && !cb->tie_word_embeddings &&
          strcmp(cb->model_type, "llama") == 0);
    /* the file stores eps as f32 */
    CHECK(fabs(ca->rms_norm_eps - cb->rms_norm_eps) < 1e-12);
    CHECK(attn_llama_param_count(a) == attn_llama_param_count(b));
    CHECK(attn_llama_chat_template(b) == NULL &&
          attn_llama_tokenizer(b) == NULL);
    const int64_t np = attn_decoder_param_count(&a->dec);
    CHECK_MSG(memcmp(a->params, b->params, sizeof(float) * (size_t)np) == 0,
              "the decoder's parameters differ between folder and file");
    const int64_t V = ca->vocab_size, L = 7;
    int32_t ids[7] = {5, 17, 299, 0, 42, 42, 128};
    float *za = malloc(sizeof(float) * (size_t)(L * V)),
          *zb = malloc(sizeof(float) * (size_t)(L * V));
    CHECK_STATUS(attn_llama_forward(a, 1, L, ids, 2, za, NULL), ATTN_OK);
    CHECK_STATUS(attn_llama_forward(b, 1, L, ids, 2, zb, NULL), ATTN_OK);
    double err = 0, mx = 0;
    for (int64_t i = 0; i < L * V; i++) {
        err = fmax(err, fabs(za[i] - zb[i]));
        mx = fmax(mx, fabs(za[i]));
    }
    CHECK_MSG(err <= 1e-6 * mx, "logits differ by %g of %g", err, mx);
    free(za);
    free(zb);
    /* the quantized view of an F32 file: the f32 rows themselves */
    CHECK(b->quant && b->quant->layers[ATTN__LQ_Q].type == ATTN_GGML_F32);
    attn_llama_free(a);
    attn_llama_free(b);
}

/* Rows of a kept weight dequantized (unpacked first where the kernel
 * keeps them packed), against the f32 weight. */
static int rows_match(const attn__llama_qweight *q, const float *w) {
    const size_t bytes = (size_t)q->rows * q->row_bytes;
    unsigned char *plain = malloc(bytes);
    if (!plain) return 0;
    if (q->packed) {
        const attn__qmat p = {q->type, q->rows, q->cols, q->data, 1};
        attn__q_unpack(&p, plain);
    } else {
        memcpy(plain, q->data, bytes);
    }
    attn_gguf_tensor t;
    memset(&t, 0, sizeof t);
    t.name = "kept";
    t.type = q->type;
    t.type_name = "kept";
    t.ndim = 2;
    t.shape[0] = q->rows;
    t.shape[1] = q->cols;
    t.numel = q->rows * q->cols;
    t.data = plain;
    t.nbytes = bytes;
    float *x = malloc(sizeof(float) * (size_t)t.numel);
    int ok = x && attn_gguf_tensor_to_f32(&t, x, t.numel) == ATTN_OK &&
             memcmp(x, w, sizeof(float) * (size_t)t.numel) == 0;
    free(x);
    free(plain);
    return ok;
}

/* Q8_0: the kept rows (Q and K un-permuted as bytes) are the f32 weights. */
static void quantized_rows(void) {
    attn_llama *m = load("llama_gqa_q8.gguf");
    if (!m) return;
    const attn_llama_config *c = attn_llama_get_config(m);
    const int64_t E = c->hidden_size, F = c->intermediate_size;
    CHECK(m->quant && m->quant->embed.type == ATTN_GGML_Q8_0 &&
          m->quant->embed.rows == c->vocab_size && m->quant->embed.cols == E);
    CHECK(rows_match(&m->quant->embed, m->embed));
    CHECK(rows_match(&m->quant->head, m->head));
    for (int64_t l = 0; l < c->num_layers; l++) {
        attn_decoder_layer_params P;
        attn_decoder_layer_view(&m->dec, m->params, l, &P);
        const attn__llama_qweight *q = m->quant->layers + l * ATTN__LQ_N;
        CHECK(q[ATTN__LQ_Q].type == ATTN_GGML_Q8_0 &&
              q[ATTN__LQ_DOWN].type == ATTN_GGML_F32);
        CHECK_MSG(rows_match(&q[ATTN__LQ_Q], P.self_attn.w_q) &&
                      rows_match(&q[ATTN__LQ_K], P.self_attn.w_k) &&
                      rows_match(&q[ATTN__LQ_V], P.self_attn.w_v) &&
                      rows_match(&q[ATTN__LQ_O], P.self_attn.w_o) &&
                      rows_match(&q[ATTN__LQ_GATE], P.w_1) &&
                      rows_match(&q[ATTN__LQ_UP], P.w_1 + F * E) &&
                      rows_match(&q[ATTN__LQ_DOWN], P.w_2),
                  "layer %lld: kept rows differ from the f32 weights",
                  (long long)l);
    }
    /* and the model is the folder's, up to Q8_0's rounding */
    char dir[2048];
    snprintf(dir, sizeof dir, "%s/tests/data/llama/llama_gqa", ATTN_SOURCE_DIR);
    attn_llama *a = NULL;
    CHECK_STATUS(attn_llama_load(dir, &a), ATTN_OK);
    int32_t ids[5] = {3, 1, 4, 1, 5};
    const int64_t V = c->vocab_size;
    float *za = malloc(sizeof(float) * 5 * (size_t)V),
          *zb = malloc(sizeof(float) * 5 * (size_t)V);
    CHECK_STATUS(attn_llama_forward(a, 1, 5, ids, 1, za, NULL), ATTN_OK);
    CHECK_STATUS(attn_llama_forward(m, 1, 5, ids, 1, zb, NULL), ATTN_OK);
    double err = 0, mx = 0;
    for (int64_t i = 0; i < 5 * V; i++) {
        err = fmax(err, fabs(za[i] - zb[i]));
        mx = fmax(mx, fabs(za[i]));
    }
    CHECK_MSG(err <= 0.05 * mx, "Q8_0 logits off by %g of %g", err, mx);
    free(za);
    free(zb);
    attn_llama_free(a);
    attn_llama_free(m);
}

static void tied(void) {
    attn_llama *m = load("tied.gguf");
    if (!m) return;
    const attn_llama_config *c = attn_llama_get_config(m);
    CHECK(c->tie_word_embeddings && m->head == m->embed &&
          m->quant->head.rows == 0 && c->num_kv_heads == 1);
    int32_t ids[3] = {1, 2, 15};
    float z[3 * 16];
    CHECK_STATUS(attn_llama_forward(m, 1, 3, ids, 1, z, NULL), ATTN_OK);
    attn_llama_free(m);
}

static void refused(const char *name, attn_status want, const char *needle) {
    char path[2048];
    path_of(path, sizeof path, name);
    attn_llama *m = (attn_llama *)path; /* must come back NULL */
    CHECK_STATUS(attn_llama_load(path, &m), want);
    CHECK(m == NULL);
    CHECK_MSG(strstr(attn_last_error(), needle) != NULL,
              "%s: message '%s' does not name '%s'", name, attn_last_error(),
              needle);
}

/* The first n bytes of a fixture as a temporary file, loaded. */
static attn_status load_cut(const char *name, long n) {
    char path[2048], tmp[] = "/tmp/attn_gguf_cut_XXXXXX";
    path_of(path, sizeof path, name);
    int fd = mkstemp(tmp);
    if (fd < 0) return ATTN_E_IO;
    FILE *in = fopen(path, "rb");
    unsigned char buf[4096];
    long left = n;
    while (in && left > 0) {
        size_t k = fread(buf, 1, left < 4096 ? (size_t)left : 4096, in);
        if (k == 0 || write(fd, buf, k) != (ssize_t)k) break;
        left -= (long)k;
    }
    if (in) fclose(in);
    close(fd);
    attn_llama *m = NULL;
    attn_status st = attn_llama_load(tmp, &m);
    attn_llama_free(m);
    unlink(tmp);
    return st;
}

int main(void) {
    same_as_folder();
    quantized_rows();
    tied();
    refused("arch_gemma.gguf", ATTN_E_UNSUPPORTED, "'gemma'");
    refused("missing.gguf", ATTN_E_FORMAT, "'blk.0.ffn_up.weight' is missing");
    refused("shape.gguf", ATTN_E_FORMAT, "'blk.0.attn_k.weight' has 2 dims");
    refused("q6k.gguf", ATTN_E_UNSUPPORTED, "Q6_K");
    refused("rope_yarn.gguf", ATTN_E_UNSUPPORTED, "'yarn'");
    /* cut inside the metadata, inside the tensor table, inside the data */
    CHECK_STATUS(load_cut("tied.gguf", 100), ATTN_E_FORMAT);
    CHECK_STATUS(load_cut("tied.gguf", 900), ATTN_E_FORMAT);
    CHECK_STATUS(load_cut("tied.gguf", 20000), ATTN_E_FORMAT);
    CHECK_STATUS(load_cut("tied.gguf", 3), ATTN_E_IO); /* not GGUF: a folder */
    return check_done("test_llama_gguf");
}

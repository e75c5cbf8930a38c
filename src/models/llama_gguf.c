/* A Llama-family model from a GGUF file (llama.cpp's single-file form):
 * the llama architecture's metadata into attn_llama_config, the tokenizer
 * from tokenizer.ggml.*, and every tensor through the name table of
 * llama_load.c (its GGUF column), dequantized to f32. The file's bytes of
 * each 2-D weight are kept too (attn__llama_quant, llama.h).
 *
 * The GGUF converter stores the rows of the Q and K projections of each
 * head interleaved for pair-wise rotation: file row 2i + j of a head holds
 * row j * (d/2) + i of the original (j in {0, 1}, i < d/2). The rows are
 * put back here, so the decoder rotates halves (neox) exactly as for the
 * transformers checkpoint the file was made from. */
#include "llama.h"
#include "attn_gguf.h"
#include "attn_tokenizer.h"
#include "../io/json.h" /* attn__escape_bytes */
#include "../kernels/gemv.h"

#include <string.h>

/* ---- metadata ------------------------------------------------------------ */

static attn_status meta_int(const attn_gguf *g, const char *key, int64_t def,
                            int64_t lo, int64_t hi, int64_t *out) {
    attn_gguf_value v;
    if (attn_gguf_meta_find(g, key, &v) != ATTN_OK) {
        if (def == INT64_MIN)
            return attn__fail(ATTN_E_FORMAT, "GGUF metadata '%s' is missing",
                              key);
        *out = def;
        return ATTN_OK;
    }
    int64_t x;
    attn_status st = attn_gguf_get_int(g, key, &x);
    if (st) return st;
    if (x < lo || x > hi)
        return attn__fail(ATTN_E_FORMAT,
                          "GGUF metadata '%s' = %lld is outside [%lld, %lld]",
                          key, (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return ATTN_OK;
}

static attn_status meta_float(const attn_gguf *g, const char *key, double def,
                              double lo, double hi, double *out) {
    attn_gguf_value v;
    if (attn_gguf_meta_find(g, key, &v) != ATTN_OK) {
        *out = def;
        return ATTN_OK;
    }
    double x;
    attn_status st = attn_gguf_get_float(g, key, &x);
    if (st) return st;
    if (!(x >= lo) || !(x <= hi))
        return attn__fail(ATTN_E_FORMAT,
                          "GGUF metadata '%s' = %g is outside [%g, %g]", key, x,
                          lo, hi);
    *out = x;
    return ATTN_OK;
}

/* A string value as NUL-terminated escaped text for messages. */
static const char *esc(const char *s, size_t n, char *buf, size_t cap) {
    return attn__escape_bytes(s, n, buf, cap);
}

/* The rope scaling keys: none, or linear with its factor. */
static attn_status read_rope(const attn_gguf *g, attn_rope *r) {
    attn_rope_init(r);
    attn_status st =
        meta_float(g, "llama.rope.freq_base", 10000.0, 1.0, 1e300, &r->theta);
    if (st) return st;
    const char *type = NULL;
    size_t tn = 0;
    attn_gguf_value v;
    if (attn_gguf_meta_find(g, "llama.rope.scaling.type", &v) == ATTN_OK &&
        (st = attn_gguf_get_string(g, "llama.rope.scaling.type", &type, &tn)))
        return st;
    double lin = 1.0;
    if ((st = meta_float(g, "llama.rope.scale_linear", 1.0, 1.0, 1e9, &lin)))
        return st;
    if (type && tn == 4 && memcmp(type, "none", 4) == 0) type = NULL;
    if (!type && lin == 1.0) return ATTN_OK;
    if (!type || (tn == 6 && memcmp(type, "linear", 6) == 0)) {
        r->scaling = ATTN_ROPE_SCALING_LINEAR;
        r->factor = lin;
        return type ? meta_float(g, "llama.rope.scaling.factor", lin, 1.0, 1e9,
                                 &r->factor)
                    : ATTN_OK;
    }
    char eb[64];
    return attn__fail(ATTN_E_UNSUPPORTED,
                      "GGUF llama.rope.scaling.type '%s' is not supported "
                      "(none or linear)",
                      esc(type, tn, eb, sizeof eb));
}

static attn_status read_config(const attn_gguf *g, attn_llama_config *c) {
    memset(c, 0, sizeof *c);
    const char *arch;
    size_t an;
    attn_status st =
        attn_gguf_get_string(g, "general.architecture", &arch, &an);
    if (st) return st;
    char eb[64];
    if (an != 5 || memcmp(arch, "llama", 5) != 0)
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "GGUF general.architecture '%s' is not supported "
                          "(llama)",
                          esc(arch, an, eb, sizeof eb));
    snprintf(c->model_type, sizeof c->model_type, "llama");
    const int64_t M = INT64_MIN;
    int64_t rope_dim = 0, key_len = 0, val_len = 0;
    attn_gguf_value tv;
    int64_t nvocab = 0;
    if (attn_gguf_meta_find(g, "tokenizer.ggml.tokens", &tv) == ATTN_OK &&
        tv.type == ATTN_GGUF_ARRAY)
        nvocab = (int64_t)tv.count;
    if ((st = meta_int(g, "llama.block_count", M, 1, 1024, &c->num_layers)) ||
        (st = meta_int(g, "llama.embedding_length", M, 1, 1 << 16,
                       &c->hidden_size)) ||
        (st = meta_int(g, "llama.feed_forward_length", M, 1, 1 << 20,
                       &c->intermediate_size)) ||
        (st = meta_int(g, "llama.attention.head_count", M, 1, 1024,
                       &c->num_heads)) ||
        (st = meta_int(g, "llama.attention.head_count_kv", c->num_heads, 1,
                       1024, &c->num_kv_heads)) ||
        (st = meta_int(g, "llama.context_length", 4096, 1, 1 << 24,
                       &c->max_position)) ||
        (st = meta_int(g, "llama.vocab_size", nvocab ? nvocab : M, 1, 1 << 24,
                       &c->vocab_size)) ||
        (st = meta_float(g, "llama.attention.layer_norm_rms_epsilon", 1e-5,
                         1e-30, 1.0, &c->rms_norm_eps)) ||
        (st = read_rope(g, &c->rope)))
        return st;
    if (c->hidden_size % c->num_heads || c->num_heads % c->num_kv_heads)
        return attn__fail(ATTN_E_FORMAT,
                          "GGUF embedding_length %lld, head_count %lld and "
                          "head_count_kv %lld do not divide",
                          (long long)c->hidden_size, (long long)c->num_heads,
                          (long long)c->num_kv_heads);
    const int64_t hd = c->hidden_size / c->num_heads;
    if ((st = meta_int(g, "llama.rope.dimension_count", hd, 1, 1 << 16,
                       &rope_dim)) ||
        (st = meta_int(g, "llama.attention.key_length", hd, 1, 1 << 16,
                       &key_len)) ||
        (st = meta_int(g, "llama.attention.value_length", hd, 1, 1 << 16,
                       &val_len)))
        return st;
    if (rope_dim != hd || key_len != hd || val_len != hd)
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "GGUF rope.dimension_count %lld, key_length %lld, "
                          "value_length %lld: the Llama family here rotates "
                          "whole heads of embedding_length / head_count = "
                          "%lld",
                          (long long)rope_dim, (long long)key_len,
                          (long long)val_len, (long long)hd);
    if (hd % 2)
        return attn__fail(ATTN_E_FORMAT, "GGUF head size %lld is odd",
                          (long long)hd);
    attn_gguf_tensor t;
    c->tie_word_embeddings =
        attn_gguf_find_tensor(g, "output.weight", &t) != ATTN_OK;
    if ((st = meta_int(g, "tokenizer.ggml.bos_token_id", -1, -1,
                       c->vocab_size - 1, &c->bos_token_id)) ||
        (st = meta_int(g, "tokenizer.ggml.eos_token_id", -1, -1,
                       c->vocab_size - 1, &c->eos_token_id)))
        return st;
    c->stored_dtype = ATTN_F32;
    return attn_rope_check(&c->rope, hd);
}

/* ---- tokenizer ----------------------------------------------------------- */

/* The count strings of array key, NUL-terminated, into one pool. */
static attn_status string_array(const attn_gguf *g, const char *key,
                                int64_t *count, const char ***out,
                                char **pool) {
    attn_gguf_value v;
    attn_status st = attn_gguf_meta_find(g, key, &v);
    if (st)
        return attn__fail(ATTN_E_FORMAT, "GGUF metadata '%s' is missing", key);
    if (v.type != ATTN_GGUF_ARRAY || v.elem_type != ATTN_GGUF_STRING)
        return attn__fail(ATTN_E_FORMAT,
                          "GGUF metadata '%s' is not an array of strings", key);
    size_t total = 0;
    for (uint64_t i = 0; i < v.count; i++) {
        const char *s;
        size_t n;
        if ((st = attn_gguf_array_string(g, &v, i, &s, &n))) return st;
        total += n + 1;
    }
    const char **ptrs = attn__alloc(v.count + 1, sizeof *ptrs, key);
    char *p = ptrs ? attn__alloc(total + 1, 1, key) : NULL;
    if (!p) {
        attn__free(ptrs);
        return ATTN_E_NOMEM;
    }
    size_t at = 0;
    for (uint64_t i = 0; i < v.count; i++) {
        const char *s;
        size_t n;
        attn_gguf_array_string(g, &v, i, &s, &n);
        if (memchr(s, '\0', n)) {
            attn__free(ptrs);
            attn__free(p);
            return attn__fail(ATTN_E_FORMAT,
                              "GGUF metadata '%s': element %llu holds a NUL "
                              "byte",
                              key, (unsigned long long)i);
        }
        memcpy(p + at, s, n);
        p[at + n] = '\0';
        ptrs[i] = p + at;
        at += n + 1;
    }
    *count = (int64_t)v.count;
    *out = ptrs;
    *pool = p;
    return ATTN_OK;
}

static attn_status read_tokenizer(const attn_gguf *g, attn_llama *m) {
    const char *model;
    size_t mn;
    attn_gguf_value v;
    if (attn_gguf_meta_find(g, "tokenizer.ggml.model", &v) != ATTN_OK)
        return ATTN_OK; /* a file without a tokenizer runs on ids */
    attn_status st =
        attn_gguf_get_string(g, "tokenizer.ggml.model", &model, &mn);
    if (st) return st;
    char eb[64], pre[32] = "gpt2";
    if (mn != 4 || memcmp(model, "gpt2", 4) != 0)
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "GGUF tokenizer.ggml.model '%s' is not supported "
                          "(gpt2: byte-level BPE)",
                          esc(model, mn, eb, sizeof eb));
    if (attn_gguf_meta_find(g, "tokenizer.ggml.pre", &v) == ATTN_OK) {
        const char *p;
        size_t pn;
        if ((st = attn_gguf_get_string(g, "tokenizer.ggml.pre", &p, &pn)))
            return st;
        if (pn >= sizeof pre || memchr(p, '\0', pn))
            return attn__fail(ATTN_E_UNSUPPORTED,
                              "GGUF tokenizer.ggml.pre '%s' is not supported",
                              esc(p, pn, eb, sizeof eb));
        memcpy(pre, p, pn);
        pre[pn] = '\0';
    }
    attn_bpe_vocab bv;
    attn_bpe_vocab_init(&bv);
    const char **tokens = NULL, **merges = NULL;
    char *tpool = NULL, *mpool = NULL;
    int32_t *types = NULL;
    int64_t nt = 0, nm = 0, add_bos = 0;
    st = string_array(g, "tokenizer.ggml.tokens", &nt, &tokens, &tpool);
    if (!st)
        st = string_array(g, "tokenizer.ggml.merges", &nm, &merges, &mpool);
    if (!st && nt != m->cfg.vocab_size)
        st = attn__fail(ATTN_E_FORMAT,
                        "GGUF tokenizer.ggml.tokens has %lld tokens but the "
                        "vocabulary is %lld",
                        (long long)nt, (long long)m->cfg.vocab_size);
    if (!st &&
        attn_gguf_meta_find(g, "tokenizer.ggml.token_type", &v) == ATTN_OK) {
        if (v.type != ATTN_GGUF_ARRAY || v.count != (uint64_t)nt)
            st = attn__fail(ATTN_E_FORMAT,
                            "GGUF tokenizer.ggml.token_type is not an array "
                            "of %lld integers",
                            (long long)nt);
        types = st ? NULL : attn__alloc((size_t)nt + 1, sizeof *types, "types");
        if (!st && !types) st = ATTN_E_NOMEM;
        for (int64_t i = 0; i < nt && !st; i++) {
            int64_t x;
            st = attn_gguf_array_int(g, &v, (uint64_t)i, &x);
            types[i] = x >= 0 && x <= 6 ? (int32_t)x : 1;
        }
    }
    if (!st)
        st = meta_int(g, "tokenizer.ggml.add_bos_token", 0, 0, 1, &add_bos);
    if (!st) {
        bv.n_tokens = nt;
        bv.tokens = tokens;
        bv.token_types = types;
        bv.n_merges = nm;
        bv.merges = merges;
        bv.pre = pre;
        bv.bos_id = m->cfg.bos_token_id;
        bv.eos_id = m->cfg.eos_token_id;
        bv.add_bos = (int)add_bos;
        st = attn_bpe_from_vocab(&bv, &m->tok);
    }
    attn__free(tokens);
    attn__free(tpool);
    attn__free(merges);
    attn__free(mpool);
    attn__free(types);
    if (st) return st;
    /* the chat template, kept as text */
    if (attn_gguf_meta_find(g, "tokenizer.chat_template", &v) == ATTN_OK) {
        const char *s;
        size_t n;
        if ((st = attn_gguf_get_string(g, "tokenizer.chat_template", &s, &n)))
            return st;
        m->chat_template = attn__alloc(n + 1, 1, "chat template");
        if (!m->chat_template) return ATTN_E_NOMEM;
        memcpy(m->chat_template, s, n);
        m->chat_template[n] = '\0';
    }
    return ATTN_OK;
}

/* ---- tensors ------------------------------------------------------------- */

/* Rows of the heads of a Q or K projection (heads of hd rows of rb bytes)
 * from the file's pair order back to halves. */
static void unpermute(unsigned char *dst, const unsigned char *src,
                      int64_t heads, int64_t hd, size_t rb) {
    for (int64_t h = 0; h < heads; h++)
        for (int64_t j = 0; j < 2; j++)
            for (int64_t i = 0; i < hd / 2; i++)
                memcpy(dst + (size_t)(h * hd + j * (hd / 2) + i) * rb,
                       src + (size_t)(h * hd + 2 * i + j) * rb, rb);
}

static attn__llama_qweight *qslot(attn__llama_quant *q,
                                  const attn__llama_slot *s) {
    switch (s->kind) {
    case DST_EMBED: return &q->embed;
    case DST_HEAD: return &q->head;
    case DST_WQ: return &q->layers[s->layer * ATTN__LQ_N + ATTN__LQ_Q];
    case DST_WK: return &q->layers[s->layer * ATTN__LQ_N + ATTN__LQ_K];
    case DST_WV: return &q->layers[s->layer * ATTN__LQ_N + ATTN__LQ_V];
    case DST_WO: return &q->layers[s->layer * ATTN__LQ_N + ATTN__LQ_O];
    case DST_GATE: return &q->layers[s->layer * ATTN__LQ_N + ATTN__LQ_GATE];
    case DST_UP: return &q->layers[s->layer * ATTN__LQ_N + ATTN__LQ_UP];
    case DST_DOWN: return &q->layers[s->layer * ATTN__LQ_N + ATTN__LQ_DOWN];
    default: return NULL;
    }
}

/* Values the model's weights need from the file (the table's wanted rows):
 * compared with what the file holds before anything is allocated, so that
 * memory stays in proportion to the file. */
static int64_t needed_values(const attn_llama_config *c) {
    const int64_t E = c->hidden_size, F = c->intermediate_size,
                  KV = c->num_kv_heads * (E / c->num_heads);
    const int64_t per_layer = 2 * E * E + 2 * KV * E + 3 * E * F + 2 * E;
    return c->vocab_size * E * (c->tie_word_embeddings ? 1 : 2) + E +
           c->num_layers * per_layer;
}

/* Blocks the decoding kernel reads packed (gemv.h) are kept so: the
 * layout changes at load, once, not at each product. */
static attn_status pack(attn__llama_qweight *q, unsigned char *dst) {
    const attn__qmat w = {q->type, q->rows, q->cols, dst, 0};
    if (!attn__q_pack_wanted() || q->rows < 4 ||
        attn__q_row_bytes(q->type, q->cols) != q->row_bytes)
        return ATTN_OK;
    const size_t bytes = q->row_bytes * (size_t)q->rows;
    unsigned char *tmp = attn__alloc(bytes, 1, "packed blocks");
    if (!tmp) return ATTN_E_NOMEM;
    attn__q_pack(&w, tmp);
    memcpy(dst, tmp, bytes);
    attn__free(tmp);
    q->packed = 1;
    return ATTN_OK;
}

static attn_status one_tensor(attn_llama *m, const char *path,
                              const attn_gguf_tensor *t, uint8_t *seen,
                              size_t *used, float *tmp) {
    const attn_llama_config *c = &m->cfg;
    attn__llama_slot s;
    attn_status st =
        attn__llama_place(m, path, t->name, 1, t->ndim, t->shape, seen, &s);
    if (st) return st;
    const int permuted = s.kind == DST_WQ || s.kind == DST_WK;
    const int64_t hd = c->hidden_size / c->num_heads;
    st = attn_gguf_tensor_to_f32(t, permuted ? tmp : s.dst, t->numel);
    if (st) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", attn_last_error());
        return attn__fail(st, "%s: %s", path, msg);
    }
    if (permuted)
        unpermute((unsigned char *)s.dst, (const unsigned char *)tmp,
                  s.rows / hd, hd, (size_t)s.cols * sizeof(float));
    attn__llama_qweight *q = t->ndim == 2 ? qslot(m->quant, &s) : NULL;
    if (!q) return ATTN_OK;
    unsigned char *dst = m->quant->store + *used;
    const size_t rb = t->nbytes / (size_t)s.rows;
    if (permuted)
        unpermute(dst, t->data, s.rows / hd, hd, rb);
    else
        memcpy(dst, t->data, t->nbytes);
    q->type = t->type;
    q->rows = s.rows;
    q->cols = s.cols;
    q->row_bytes = rb;
    q->data = dst;
    *used += t->nbytes;
    return pack(q, dst);
}

static attn_status read_tensors(const attn_gguf *g, attn_llama *m,
                                const char *path) {
    const int64_t nt = attn_gguf_tensor_count(g);
    size_t bytes2d = 0;
    int64_t values = 0, max_numel = 0;
    for (int64_t i = 0; i < nt; i++) {
        attn_gguf_tensor t;
        attn_gguf_tensor_get(g, i, &t);
        if (strcmp(t.name, "rope_freqs.weight") == 0)
            return attn__fail(ATTN_E_UNSUPPORTED,
                              "%s: tensor 'rope_freqs.weight' (a rope "
                              "scaling by frequency factors, as Llama 3's) "
                              "is not supported",
                              path);
        values += t.numel;
        if (t.ndim == 2) bytes2d += t.nbytes;
        if (t.numel > max_numel) max_numel = t.numel;
    }
    /* a margin, so that a missing tensor is named below */
    if (needed_values(&m->cfg) > 2 * values + (1 << 16))
        return attn__fail(ATTN_E_FORMAT,
                          "%s: the file's tensors hold %lld values; its "
                          "metadata describes a model of %lld",
                          path, (long long)values,
                          (long long)needed_values(&m->cfg));
    attn_status st = attn__llama_alloc(m);
    if (st) return st;
    const int64_t nslots = attn__llama_slots(m);
    const int64_t E = m->cfg.hidden_size;
    uint8_t *seen = attn__alloc((size_t)nslots, 1, "tensor table");
    float *tmp =
        seen ? attn__alloc((size_t)(E * E) + 1, sizeof(float), "a projection")
             : NULL;
    m->quant =
        tmp ? attn__alloc(1, sizeof *m->quant, "quantized weights") : NULL;
    if (m->quant) {
        memset(m->quant, 0, sizeof *m->quant);
        m->quant->layers = attn__alloc((size_t)m->cfg.num_layers * ATTN__LQ_N,
                                       sizeof *m->quant->layers, "layers");
        m->quant->store =
            m->quant->layers ? attn__alloc(bytes2d + 1, 1, "weights") : NULL;
    }
    if (!m->quant || !m->quant->store) {
        attn__free(seen);
        attn__free(tmp);
        return ATTN_E_NOMEM;
    }
    memset(seen, 0, (size_t)nslots);
    memset(m->quant->layers, 0,
           (size_t)m->cfg.num_layers * ATTN__LQ_N * sizeof *m->quant->layers);
    size_t used = 0;
    for (int64_t i = 0; i < nt && !st; i++) {
        attn_gguf_tensor t;
        attn_gguf_tensor_get(g, i, &t);
        st = one_tensor(m, path, &t, seen, &used, tmp);
    }
    if (!st) st = attn__llama_check_seen(m, path, seen, 1);
    attn__free(seen);
    attn__free(tmp);
    return st;
}

attn_status attn__llama_from_gguf(attn_llama *m, const attn_gguf *g,
                                  const char *label) {
    attn_status st = read_config(g, &m->cfg);
    if (st) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", attn_last_error());
        return attn__fail(st, "%s: %s", label, msg);
    }
    st = read_tensors(g, m, label);
    if (!st) st = read_tokenizer(g, m);
    return st;
}

attn_status attn__llama_load_gguf(attn_llama *m, const char *path) {
    attn_gguf *g;
    attn_status st = attn_gguf_open(path, &g);
    if (st) return st;
    st = attn__llama_from_gguf(m, g, path);
    attn_gguf_close(g);
    return st;
}

void attn__llama_quant_free(attn__llama_quant *q) {
    if (!q) return;
    attn__free(q->layers);
    attn__free(q->store);
    attn__free(q);
}

/* Running a BERT-family model: embeddings and their LayerNorm, then attn's
 * encoder stack (attn_encoder_forward, post-norm, GELU, biases) with the
 * padding as key lengths; mean pooling and L2 normalization for sentence
 * embeddings; texts encoded and batched with padding. */
#include "bert.h"
#include "../kernels/cpu.h"
#include "../layers/layers.h"

#include <string.h>

static attn_status check_inputs(const attn_bert *m, int64_t B, int64_t L,
                                const int32_t *ids, const int32_t *types,
                                const int64_t *lengths) {
    if (!m || !ids)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", m ? "ids" : "m");
    const attn_bert_config *c = &m->cfg;
    if (B < 1 || L < 1 || L > c->max_position)
        return attn__fail(ATTN_E_SHAPE,
                          "B = %lld and L = %lld: B >= 1 and 1 <= "
                          "L <= %lld (max_position_embeddings) needed",
                          (long long)B, (long long)L,
                          (long long)c->max_position);
    if (!attn__size3(B, L, c->hidden_size) ||
        !attn__size3(B, L, c->intermediate_size))
        return attn__fail(ATTN_E_NOMEM, "B * L * features overflows");
    for (int64_t b = 0; b < B; b++) {
        if (lengths && (lengths[b] < 1 || lengths[b] > L))
            return attn__fail(ATTN_E_INVALID,
                              "lengths[%lld] is %lld; it must be "
                              "in [1, %lld]",
                              (long long)b, (long long)lengths[b],
                              (long long)L);
        for (int64_t i = 0; i < L; i++) {
            int64_t k = b * L + i;
            if (ids[k] < 0 || ids[k] >= c->vocab_size)
                return attn__fail(ATTN_E_INVALID,
                                  "ids[%lld, %lld] is %d, outside "
                                  "the vocabulary [0, %lld)",
                                  (long long)b, (long long)i, ids[k],
                                  (long long)c->vocab_size);
            if (types && (types[k] < 0 || types[k] >= c->type_vocab_size))
                return attn__fail(ATTN_E_INVALID,
                                  "type_ids[%lld, %lld] is %d, "
                                  "outside [0, %lld)",
                                  (long long)b, (long long)i, types[k],
                                  (long long)c->type_vocab_size);
        }
    }
    return ATTN_OK;
}

attn_status attn_bert_forward(const attn_bert *m, int64_t B, int64_t L,
                              const int32_t *ids, const int32_t *types,
                              const int64_t *lengths, int threads,
                              float *hidden, float *weights) {
    attn_status st = check_inputs(m, B, L, ids, types, lengths);
    if (st) return st;
    if (!hidden) return attn__fail(ATTN_E_INVALID, "hidden is NULL");
    if (threads < 0)
        return attn__fail(ATTN_E_INVALID, "threads is %d (< 0)", threads);
    const int64_t E = m->cfg.hidden_size, n = B * L;
    size_t wsn;
    if ((st = attn__encoder_infer_ws_size(&m->enc, B, L, &wsn))) return st;
    const size_t xn = (size_t)(n * E) * 2, need = xn + wsn;
    if (need < wsn)
        return attn__fail(ATTN_E_NOMEM, "BERT buffer size overflows");
    int64_t *lens = attn__alloc((size_t)B, sizeof(int64_t), "lengths");
    if (!lens) return ATTN_E_NOMEM;
    /* the model's kept buffers (a const model: they are not its state) */
    attn_bert *mm = (attn_bert *)m;
    const int mine = !atomic_flag_test_and_set(&mm->buf_busy);
    float *x = mine && mm->buf_cap >= need ? mm->buf : NULL;
    if (!x && !(x = attn__alloc(need, sizeof(float), "BERT buffers"))) {
        if (mine) atomic_flag_clear(&mm->buf_busy);
        attn__free(lens);
        return ATTN_E_NOMEM;
    }
    float *sum = x + n * E, *ws = x + xn;
#pragma omp parallel for schedule(static)                                      \
    num_threads(attn__omp_threads(threads))
    for (int64_t r = 0; r < n; r++) {
        const float *w = m->word + (int64_t)ids[r] * E,
                    *p = m->pos + (r % L) * E;
        const float *t = m->type + (types ? (int64_t)types[r] : 0) * E;
        for (int64_t c = 0; c < E; c++) sum[r * E + c] = w[c] + p[c] + t[c];
    }
    st = attn__layernorm_forward(n, E, sum, m->ln_g, m->ln_b,
                                 m->cfg.layer_norm_eps, x, NULL, NULL, threads);
    if (!st) {
        for (int64_t b = 0; b < B; b++) lens[b] = lengths ? lengths[b] : L;
        attn_layer_opts o;
        attn_sdpa_opts_init(&o);
        o.threads = threads;
        o.mask.key_lengths = lens;
        const int was = attn__linear_bf16_scope(m->bf16);
        const attn__packed_set *pwas = attn__linear_packed_scope(m->packed);
        st = attn__encoder_infer(&m->enc, m->params, B, L, x, &o, hidden,
                                 weights, ws);
        attn__linear_packed_scope(pwas);
        attn__linear_bf16_scope(was);
    }
    if (mine && x != mm->buf) { /* keep the larger */
        attn__free(mm->buf);
        mm->buf = x;
        mm->buf_cap = need;
    } else if (x != mm->buf) {
        attn__free(x);
    }
    if (mine) atomic_flag_clear(&mm->buf_busy);
    attn__free(lens);
    return st;
}

void attn__bert_pack(attn_bert *m) {
    enum { PER = 6, MAXL = 64 }; /* W_q, W_k, W_v, W_o, W_1, W_2 */
    const int64_t nl = m->enc.num_layers, E = m->enc.d_model,
                  F = m->enc.dim_feedforward;
    if (nl > MAXL) return;
    const float *w[PER * MAXL];
    int64_t in[PER * MAXL], out[PER * MAXL];
    int k = 0;
    for (int64_t l = 0; l < nl; l++) {
        attn_encoder_layer_params P;
        if (attn_encoder_layer_view(&m->enc, m->params, l, &P)) return;
        /* W_q, W_k, W_v one after the other: one product of 3 E outputs
         * (the attention reads its heads from it, attn_mha_forward) */
        const int qkv =
            P.mha.w_k == P.mha.w_q + E * E && P.mha.w_v == P.mha.w_k + E * E;
        const float *lw[PER] = {P.mha.w_q, P.mha.w_k, P.mha.w_v,
                                P.mha.w_o, P.w_1,     P.w_2};
        const int64_t li[PER] = {E, E, E, E, E, F},
                      lo[PER] = {qkv ? 3 * E : E, E, E, E, F, E};
        for (int i = 0; i < PER; i++) {
            if (qkv && (i == 1 || i == 2)) continue;
            w[k] = lw[i];
            in[k] = li[i];
            out[k++] = lo[i];
        }
    }
    m->packed = attn__packed_build(k, w, in, out);
}

attn_status attn_bert_set_dtype(attn_bert *m, attn_dtype dtype) {
    if (!m) return attn__fail(ATTN_E_INVALID, "m is NULL");
    if (dtype != ATTN_F32 && dtype != ATTN_BF16)
        return attn__fail(ATTN_E_DTYPE,
                          "the model's linear maps run in f32 or bf16, not %s",
                          attn_dtype_name(dtype));
    m->bf16 = dtype == ATTN_BF16;
    return ATTN_OK;
}

attn_dtype attn_bert_get_dtype(const attn_bert *m) {
    return m && m->bf16 && attn__isa_get() >= ATTN__ISA_AVX512_BF16 ? ATTN_BF16
                                                                    : ATTN_F32;
}

attn_status attn_bert_pool(const attn_bert *m, int64_t B, int64_t L,
                           const float *hidden, const int64_t *lengths,
                           float *emb) {
    ATTN__NONNULL("m, hidden, emb", m, hidden, emb);
    if (B < 1 || L < 1)
        return attn__fail(ATTN_E_SHAPE, "B = %lld, L = %lld must be >= 1",
                          (long long)B, (long long)L);
    const int64_t E = m->cfg.hidden_size;
    for (int64_t b = 0; b < B; b++) {
        int64_t len = lengths ? lengths[b] : L;
        if (len < 1 || len > L)
            return attn__fail(ATTN_E_INVALID,
                              "lengths[%lld] is %lld; it must be "
                              "in [1, %lld]",
                              (long long)b, (long long)len, (long long)L);
        double norm = 0;
        for (int64_t c = 0; c < E; c++) {
            double s = 0;
            for (int64_t i = 0; i < len; i++) s += hidden[(b * L + i) * E + c];
            s /= (double)len;
            emb[b * E + c] = (float)s;
            norm += s * s;
        }
        norm = sqrt(norm);
        if (norm < 1e-12) norm = 1e-12;
        for (int64_t c = 0; c < E; c++)
            emb[b * E + c] = (float)(emb[b * E + c] / norm);
    }
    return ATTN_OK;
}

attn_status attn_bert_encode(const attn_bert *m, const char *a, const char *b,
                             int32_t *ids, int32_t *types, int64_t cap,
                             int64_t *n) {
    if (!m) return attn__fail(ATTN_E_INVALID, "m is NULL");
    return attn_wordpiece_encode(m->tok, a, b, m->cfg.max_seq_length, ids,
                                 types, cap, n);
}

#define EMBED_BATCH 32

attn_status attn_bert_embed_texts(const attn_bert *m, const char *const *texts,
                                  int64_t n, int threads, float *emb) {
    ATTN__NONNULL("m, texts, emb", m, texts, emb);
    if (n < 1) return attn__fail(ATTN_E_SHAPE, "n is %lld (< 1)", (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (!texts[i])
            return attn__fail(ATTN_E_INVALID, "texts[%lld] is NULL",
                              (long long)i);
    const int64_t E = m->cfg.hidden_size, Lmax = m->cfg.max_seq_length;
    const size_t cells = (size_t)(EMBED_BATCH * Lmax);
    int32_t *ids = attn__alloc(cells, sizeof *ids, "token ids");
    int64_t *lens = attn__alloc(EMBED_BATCH, sizeof *lens, "lengths");
    float *hidden =
        attn__alloc(cells * (size_t)E, sizeof(float), "hidden states");
    attn_status st = ids && lens && hidden ? ATTN_OK : ATTN_E_NOMEM;
    for (int64_t b0 = 0; b0 < n && !st; b0 += EMBED_BATCH) {
        const int64_t B = n - b0 < EMBED_BATCH ? n - b0 : EMBED_BATCH;
        int64_t L = 1;
        for (int64_t b = 0; b < B && !st; b++) {
            st = attn_bert_encode(m, texts[b0 + b], NULL, ids + b * Lmax, NULL,
                                  Lmax, &lens[b]);
            if (lens[b] > L) L = lens[b];
        }
        if (st) break;
        /* repack rows of Lmax into rows of L, padded with [PAD] */
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < L; i++)
                ids[b * L + i] = i < lens[b] ? ids[b * Lmax + i]
                                             : (int32_t)m->cfg.pad_token_id;
        st = attn_bert_forward(m, B, L, ids, NULL, lens, threads, hidden, NULL);
        if (!st) st = attn_bert_pool(m, B, L, hidden, lens, emb + b0 * E);
    }
    attn__free(ids);
    attn__free(lens);
    attn__free(hidden);
    return st;
}

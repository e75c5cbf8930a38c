/* Document ids over a KV cache: attn_kv_cache_append_docs, the ids'
 * read-back, and attn_sdpa_cached with mask.doc_q (the decode kernel and
 * its reference) against attn_sdpa_forward's reference on the same keys
 * with doc_q / doc_k.
 *
 * A packed prefill in two ragged chunks (several documents per entry, an
 * entry that stays empty, an entry of one position), then decode steps by
 * plain appends (which continue each entry's last document) and by
 * append_docs (a new document), with and without softcap + ALiBi + sinks,
 * over an f32 and a q8 cache; odd sizes (D = 17, Dv = 9, capacity 611 =
 * 2 chunks and a bit, G = 3 heads per KV head); thread counts bitwise
 * equal; reorder with a duplicated entry; a query whose document has no
 * cached key. Bad input: ids that decrease (within an append and against
 * the cache), NULL ids, doc_q over a cache without ids, doc_k given,
 * doc_q of the wrong length: clear errors, the cache unchanged. */
#include "attn_cache.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 3, HK = 2, H = 6, D = 17, DV = 9, CAP = 611, TMAX = 300 };

static float kf[B * HK * CAP * D], vf[B * HK * CAP * DV];
static int64_t ids[B * CAP]; /* the id of every cached position, as stored */
static int64_t len[B];
static unsigned long long seed = 77;

static double errmax(const float *a, const float *b, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(a[i]) || isinf(b[i])) {
            if (a[i] != b[i]) return INFINITY;
            continue;
        }
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d;
    }
    return e;
}

/* Appends T new rows (counts per entry) to both caches, with ids (docs
 * (B, T)) or without (plain: each entry's last id goes on). */
static void append_both(attn_kv_cache *c32, attn_kv_cache *c8, int64_t T,
                        const int64_t *counts, const int64_t *docs) {
    float *k = malloc(sizeof(float) * B * HK * (size_t)T * D);
    float *v = malloc(sizeof(float) * B * HK * (size_t)T * DV);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < HK; h++)
            for (int64_t t = 0; t < T; t++) {
                float *kr = k + ((b * HK + h) * T + t) * D;
                float *vr = v + ((b * HK + h) * T + t) * DV;
                for (int e = 0; e < D; e++)
                    kr[e] = (float)(2 * test_rand(&seed));
                for (int e = 0; e < DV; e++) vr[e] = (float)test_rand(&seed);
                if (t < counts[b]) {
                    memcpy(kf + ((b * HK + h) * CAP + len[b] + t) * D, kr,
                           sizeof(float) * D);
                    memcpy(vf + ((b * HK + h) * CAP + len[b] + t) * DV, vr,
                           sizeof(float) * DV);
                }
            }
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, B, HK, T, D);
    attn_tensor V = attn_tensor_4d(v, ATTN_F32, B, HK, T, DV);
    for (int w = 0; w < 2; w++) {
        attn_kv_cache *c = w ? c8 : c32;
        if (docs)
            CHECK_STATUS(attn_kv_cache_append_docs(c, &K, &V, counts, docs),
                         ATTN_OK);
        else
            CHECK_STATUS(attn_kv_cache_append(c, &K, &V, counts), ATTN_OK);
    }
    for (int64_t b = 0; b < B; b++) {
        for (int64_t t = 0; t < counts[b]; t++) {
            int64_t last = len[b] + t > 0 ? ids[b * CAP + len[b] + t - 1] : 0;
            ids[b * CAP + len[b] + t] = docs ? docs[b * T + t] : last;
        }
        len[b] += counts[b];
        /* positions not cached yet repeat the last id (never visible) */
        for (int64_t j = len[b]; j < CAP; j++)
            ids[b * CAP + j] = len[b] ? ids[b * CAP + len[b] - 1] : 0;
    }
    free(k);
    free(v);
}

/* Queries of the rows just appended (query_lengths = counts): their ids
 * are those of their positions; padded rows repeat the last one. */
static void query_docs(int64_t T, const int64_t *counts, int64_t *dq) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < T; i++) {
            int64_t at =
                len[b] - counts[b] + (i < counts[b] ? i : counts[b] - 1);
            dq[b * T + i] = at >= 0 ? ids[b * CAP + at] : 0;
        }
}

/* attn_sdpa_cached (kernel on 1 and 3 threads, reference) on both caches
 * against attn_sdpa_forward's reference over the f32 keys. */
static void attend(attn_kv_cache *c32, attn_kv_cache *c8, int64_t T,
                   const int64_t *qlen, const int64_t *dq, int mods,
                   const char *what) {
    const size_t no = (size_t)(B * H * T * DV), nl = (size_t)(B * H * T);
    float *q = malloc(sizeof(float) * B * H * (size_t)T * D);
    for (size_t i = 0; i < (size_t)(B * H * T * D); i++)
        q[i] = (float)(2 * test_rand(&seed));
    float *o = malloc(sizeof(float) * 5 * no),
          *l = malloc(sizeof(float) * 5 * nl);
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, B, H, T, D);
    attn_tensor O[5];
    for (int x = 0; x < 5; x++)
        O[x] = attn_tensor_4d(o + x * no, ATTN_F32, B, H, T, DV);
    double sinks[H] = {0.5, -1, 2, 0, -0.3, 1};
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    op.mask.causal = 1;
    op.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
    op.mask.query_lengths = qlen;
    op.mask.doc_q = dq;
    op.mask.n_doc_q = B * T;
    if (mods) {
        op.mask.softcap = 1.7;
        op.mask.alibi = ATTN_ALIBI_CAUSAL;
        op.mask.sinks = sinks;
        op.mask.n_sinks = H;
    }
    /* 0: kernel 1 thread, 1: kernel 3 threads, 2: cache reference,
     * 3: q8 kernel, 4: q8 cache reference */
    for (int x = 0; x < 5; x++) {
        attn_sdpa_opts o2 = op;
        o2.threads = x == 1 ? 3 : 1;
        o2.impl = x == 2 || x == 4 ? ATTN_IMPL_REF : ATTN_IMPL_AUTO;
        CHECK_STATUS(
            attn_sdpa_cached(&Q, x >= 3 ? c8 : c32, &o2, &O[x], l + x * nl),
            ATTN_OK);
    }
    /* the full attention over the cached keys, documents as doc_q/doc_k */
    double *oref = malloc(sizeof(double) * no);
    float *lref = malloc(sizeof(float) * nl);
    attn_tensor Kf = attn_tensor_4d(kf, ATTN_F32, B, HK, CAP, D);
    attn_tensor Vf = attn_tensor_4d(vf, ATTN_F32, B, HK, CAP, DV);
    attn_tensor Or = attn_tensor_4d(oref, ATTN_F64, B, H, T, DV);
    attn_sdpa_opts rf = op;
    rf.impl = ATTN_IMPL_REF;
    rf.mask.key_lengths = len;
    rf.mask.doc_k = ids;
    rf.mask.n_doc_k = B * CAP;
    CHECK_STATUS(attn_sdpa_forward(&Q, &Kf, &Vf, &rf, &Or, NULL, lref),
                 ATTN_OK);
    float *of = malloc(sizeof(float) * no);
    for (size_t i = 0; i < no; i++) of[i] = (float)oref[i];
    CHECK_MSG(memcmp(o, o + no, sizeof(float) * no) == 0 &&
                  memcmp(l, l + nl, sizeof(float) * nl) == 0,
              "%s: 1 and 3 threads differ", what);
    double ek = errmax(o, of, no), er = errmax(o + 2 * no, of, no);
    double elk = errmax(l, lref, nl), elr = errmax(l + 2 * nl, lref, nl);
    double e8 = errmax(o + 3 * no, o + 4 * no, no);
    double el8 = errmax(l + 3 * nl, l + 4 * nl, nl);
    CHECK_MSG(ek < 2e-5 && er < 1e-6 && elk < 1e-4 && elr < 1e-5,
              "%s: kernel %g, cache reference %g, lse %g / %g", what, ek, er,
              elk, elr);
    CHECK_MSG(e8 < 2e-5 && el8 < 1e-4, "%s: q8 kernel vs its reference %g, %g",
              what, e8, el8);
    free(q);
    free(o);
    free(l);
    free(oref);
    free(lref);
    free(of);
}

/* Ragged documents for the rows of one append: about one cut in `every`
 * rows, ids going up by 1 or 2 from each entry's last one. */
static void new_docs(int64_t T, const int64_t *counts, int64_t every,
                     int64_t *docs) {
    for (int64_t b = 0; b < B; b++) {
        int64_t id = len[b] ? ids[b * CAP + len[b] - 1] : 10 * b;
        for (int64_t t = 0; t < T; t++) {
            if (t < counts[b] && test_rand(&seed) < 2.0 / (double)every - 1.0)
                id += 1 + (test_rand(&seed) > 0);
            docs[b * T + t] = id;
        }
    }
}

static void test_prefill_decode(void) {
    attn_kv_cache_config cfg;
    attn_kv_cache_config_init(&cfg);
    cfg.batch = B;
    cfg.kv_heads = HK;
    cfg.capacity = CAP;
    cfg.head_dim = D;
    cfg.value_dim = DV;
    attn_kv_cache *c32 = NULL, *c8 = NULL;
    CHECK_STATUS(attn_kv_cache_create(&cfg, &c32), ATTN_OK);
    cfg.dtype = ATTN_Q8;
    CHECK_STATUS(attn_kv_cache_create(&cfg, &c8), ATTN_OK);
    memset(len, 0, sizeof len);
    memset(ids, 0, sizeof ids);
    static int64_t docs[B * TMAX], dq[B * TMAX];
    /* chunked prefill: two ragged chunks, documents of ~90 positions */
    const int64_t chunks[2][B] = {{300, 1, 0}, {290, 0, 0}};
    for (int s = 0; s < 2; s++) {
        new_docs(TMAX, chunks[s], 90, docs);
        append_both(c32, c8, TMAX, chunks[s], docs);
        query_docs(TMAX, chunks[s], dq);
        for (int mods = 0; mods < 2; mods++) {
            char what[80];
            snprintf(what, sizeof what, "prefill chunk %d mods %d", s, mods);
            attend(c32, c8, TMAX, chunks[s], dq, mods, what);
        }
    }
    /* the ids as stored */
    int64_t back[CAP];
    CHECK_STATUS(attn_kv_cache_doc_ids(c32, 0, 0, len[0], back), ATTN_OK);
    CHECK(memcmp(back, ids, sizeof(int64_t) * (size_t)len[0]) == 0);
    CHECK(ids[len[0] - 1] > ids[0]); /* several documents in entry 0 */
    /* decode: a plain append continues each entry's last document (entry
     * 2 was empty: document 0), then entry 0 starts a new document */
    const int64_t one[B] = {1, 1, 1}, some[B] = {1, 0, 1};
    append_both(c32, c8, 1, one, NULL);
    CHECK_STATUS(attn_kv_cache_doc_ids(c32, 0, len[0] - 1, 1, back), ATTN_OK);
    CHECK(back[0] == ids[len[0] - 2]);
    CHECK_STATUS(attn_kv_cache_doc_ids(c32, 2, 0, 1, back), ATTN_OK);
    CHECK(back[0] == 0);
    query_docs(1, one, dq);
    attend(c32, c8, 1, one, dq, 1, "decode, plain append");
    int64_t d1[B] = {ids[len[0] - 1] + 1, ids[CAP + len[1] - 1],
                     ids[2 * CAP + len[2] - 1] + 7};
    append_both(c32, c8, 1, some, d1);
    query_docs(1, some, dq);
    attend(c32, c8, 1, one, dq, 0, "decode, a new document");
    attend(c32, c8, 1, one, dq, 1, "decode, a new document, mods");
    /* a query of a document with no cached key: 0, lse -inf (or the sink) */
    {
        int64_t dn[B] = {ids[len[0] - 1] + 100, dq[1], dq[2]};
        float q[B * H * D], o[B * H * DV], l[B * H];
        for (int i = 0; i < B * H * D; i++) q[i] = 1.0f;
        attn_tensor Q = attn_tensor_4d(q, ATTN_F32, B, H, 1, D);
        attn_tensor O = attn_tensor_4d(o, ATTN_F32, B, H, 1, DV);
        attn_sdpa_opts op;
        attn_sdpa_opts_init(&op);
        op.mask.doc_q = dn;
        op.mask.n_doc_q = B;
        CHECK_STATUS(attn_sdpa_cached(&Q, c32, &op, &O, l), ATTN_OK);
        int zero = 1;
        for (int h = 0; h < H; h++) {
            for (int e = 0; e < DV; e++) zero &= o[h * DV + e] == 0.0f;
            zero &= l[h] == -INFINITY;
        }
        CHECK_MSG(zero, "a document without keys gives 0 and lse -inf");
    }
    /* reorder with a duplicate: the ids follow their entries */
    {
        int64_t before[B][CAP], lb[B];
        for (int b = 0; b < B; b++) {
            lb[b] = len[b];
            attn_kv_cache_doc_ids(c32, b, 0, len[b], before[b]);
        }
        const int64_t index[B] = {2, 0, 0};
        CHECK_STATUS(attn_kv_cache_reorder(c32, index), ATTN_OK);
        CHECK_STATUS(attn_kv_cache_reorder(c8, index), ATTN_OK);
        static int64_t nids[B * CAP];
        static float nk[B * HK * CAP * D], nv[B * HK * CAP * DV];
        for (int b = 0; b < B; b++) {
            int64_t e = index[b];
            CHECK_STATUS(attn_kv_cache_doc_ids(c32, b, 0, lb[e], back),
                         ATTN_OK);
            CHECK(memcmp(back, before[e], sizeof(int64_t) * (size_t)lb[e]) ==
                  0);
            memcpy(nids + b * CAP, ids + e * CAP, sizeof(int64_t) * CAP);
            memcpy(nk + b * HK * CAP * D, kf + e * HK * CAP * D,
                   sizeof(float) * HK * CAP * D);
            memcpy(nv + b * HK * CAP * DV, vf + e * HK * CAP * DV,
                   sizeof(float) * HK * CAP * DV);
            len[b] = lb[e];
        }
        memcpy(ids, nids, sizeof ids);
        memcpy(kf, nk, sizeof kf);
        memcpy(vf, nv, sizeof vf);
        const int64_t two[B] = {2, 2, 2};
        new_docs(2, two, 2, docs);
        append_both(c32, c8, 2, two, docs);
        query_docs(2, two, dq);
        attend(c32, c8, 2, two, dq, 1, "after reorder");
    }
    attn_kv_cache_free(c32);
    attn_kv_cache_free(c8);
}

/* Queries of a document the cache lacks, between queries of documents it
 * holds: the rows around them still see their keys (one run of rows per
 * chunk with a gap that sees nothing). */
static void test_gap(void) {
    enum { L = 9, LQ = 5, DD = 4, HH = 2 };
    attn_kv_cache_config cfg;
    attn_kv_cache_config_init(&cfg);
    cfg.batch = 1;
    cfg.kv_heads = 1;
    cfg.capacity = L;
    cfg.head_dim = DD;
    attn_kv_cache *c = NULL;
    CHECK_STATUS(attn_kv_cache_create(&cfg, &c), ATTN_OK);
    float k[L * DD], v[L * DD], q[HH * LQ * DD], o[HH * LQ * DD], l[HH * LQ],
        lr[HH * LQ];
    double orf[HH * LQ * DD];
    for (int i = 0; i < L * DD; i++) {
        k[i] = (float)test_rand(&seed);
        v[i] = (float)test_rand(&seed);
    }
    for (int i = 0; i < HH * LQ * DD; i++) q[i] = (float)test_rand(&seed);
    int64_t dk[L] = {0, 0, 0, 2, 2, 2, 2, 4, 4}, dq[LQ] = {0, 1, 2, 3, 4};
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, 1, 1, L, DD);
    attn_tensor V = attn_tensor_4d(v, ATTN_F32, 1, 1, L, DD);
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 1, HH, LQ, DD);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, 1, HH, LQ, DD);
    attn_tensor Or = attn_tensor_4d(orf, ATTN_F64, 1, HH, LQ, DD);
    CHECK_STATUS(attn_kv_cache_append_docs(c, &K, &V, NULL, dk), ATTN_OK);
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    op.mask.doc_q = dq;
    op.mask.n_doc_q = LQ;
    CHECK_STATUS(attn_sdpa_cached(&Q, c, &op, &O, l), ATTN_OK);
    op.mask.doc_k = dk;
    op.mask.n_doc_k = L;
    op.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &op, &Or, NULL, lr), ATTN_OK);
    double e = 0;
    for (int i = 0; i < HH * LQ * DD; i++) e = fmax(e, fabs(o[i] - orf[i]));
    CHECK_MSG(e < 2e-6, "documents with a gap: error %g", e);
    for (int h = 0; h < HH; h++)
        CHECK(l[h * LQ + 1] == -INFINITY && l[h * LQ + 3] == -INFINITY &&
              isfinite(l[h * LQ + 4]));
    attn_kv_cache_free(c);
}

static void test_errors(void) {
    enum { b = 2, cap = 8, d = 4 };
    attn_kv_cache_config cfg;
    attn_kv_cache_config_init(&cfg);
    cfg.batch = b;
    cfg.kv_heads = 1;
    cfg.capacity = cap;
    cfg.head_dim = d;
    attn_kv_cache *c = NULL;
    CHECK_STATUS(attn_kv_cache_create(&cfg, &c), ATTN_OK);
    float kv[b * 3 * d], q[b * 2 * d], o[b * 2 * d];
    for (int i = 0; i < b * 3 * d; i++) kv[i] = 0.1f * (float)(i % 7);
    for (int i = 0; i < b * 2 * d; i++) q[i] = 0.2f;
    attn_tensor K = attn_tensor_4d(kv, ATTN_F32, b, 1, 3, d);
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, b, 1, 2, d);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, b, 1, 2, d);
    int64_t lens[b], back[4];
    attn_sdpa_opts op;
    attn_sdpa_opts_init(&op);
    int64_t dq[b * 2] = {0, 0, 0, 0};
    op.mask.doc_q = dq;
    op.mask.n_doc_q = b * 2;
    /* a cache never given ids */
    CHECK_STATUS(attn_kv_cache_append(c, &K, &K, NULL), ATTN_OK);
    CHECK_STATUS(attn_sdpa_cached(&Q, c, &op, &O, NULL), ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(), "holds no document ids") != NULL);
    CHECK_STATUS(attn_kv_cache_doc_ids(c, 0, 0, 1, back), ATTN_E_INVALID);
    /* decreasing within an append; below the id cached before (0) */
    int64_t bad[b * 3] = {1, 2, 1, 3, 3, 3};
    CHECK_STATUS(attn_kv_cache_append_docs(c, &K, &K, NULL, bad),
                 ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(),
                 "doc_ids decreases in entry 0: position 2 has id 1 "
                 "after 2") != NULL);
    int64_t neg[b * 3] = {0, 0, 0, -1, 0, 0};
    CHECK_STATUS(attn_kv_cache_append_docs(c, &K, &K, NULL, neg),
                 ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(),
                 "doc_ids[1, 0] = -1 is below the id 0 of "
                 "entry 1's last cached position 2") != NULL);
    CHECK_STATUS(attn_kv_cache_append_docs(c, &K, &K, NULL, NULL),
                 ATTN_E_INVALID);
    attn_kv_cache_lengths(c, lens);
    CHECK(lens[0] == 3 && lens[1] == 3); /* unchanged */
    CHECK_STATUS(attn_kv_cache_doc_ids(c, 0, 0, 1, back), ATTN_E_INVALID);
    /* the first ids: the earlier positions are document 0 */
    int64_t good[b * 3] = {0, 1, 1, 4, 4, 5};
    CHECK_STATUS(attn_kv_cache_append_docs(c, &K, &K, NULL, good), ATTN_OK);
    CHECK_STATUS(attn_kv_cache_doc_ids(c, 1, 2, 4, back), ATTN_OK);
    CHECK(back[0] == 0 && back[1] == 4 && back[2] == 4 && back[3] == 5);
    CHECK_STATUS(attn_kv_cache_doc_ids(c, 1, 5, 2, back), ATTN_E_SHAPE);
    CHECK_STATUS(attn_kv_cache_doc_ids(c, 2, 0, 1, back), ATTN_E_SHAPE);
    /* doc_q: served now; wrong length, decreasing, doc_k */
    CHECK_STATUS(attn_sdpa_cached(&Q, c, &op, &O, NULL), ATTN_OK);
    op.mask.n_doc_q = 3;
    CHECK_STATUS(attn_sdpa_cached(&Q, c, &op, &O, NULL), ATTN_E_SHAPE);
    CHECK(strstr(attn_last_error(), "mask.doc_q has 3 entries") != NULL);
    op.mask.n_doc_q = b * 2;
    dq[0] = 5;
    CHECK_STATUS(attn_sdpa_cached(&Q, c, &op, &O, NULL), ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(), "mask.doc_q decreases") != NULL);
    dq[0] = 0;
    op.mask.doc_k = dq;
    op.mask.n_doc_k = b * 2;
    CHECK_STATUS(attn_sdpa_cached(&Q, c, &op, &O, NULL), ATTN_E_UNSUPPORTED);
    CHECK(strstr(attn_last_error(), "not mask.doc_k") != NULL);
    /* past the capacity: the ids are not written either */
    CHECK_STATUS(attn_kv_cache_append_docs(c, &K, &K, NULL, good),
                 ATTN_E_SHAPE);
    CHECK_STATUS(attn_kv_cache_clear(c), ATTN_OK);
    int64_t z[b * 3] = {0, 0, 0, 0, 0, 0};
    CHECK_STATUS(attn_kv_cache_append_docs(c, &K, &K, NULL, z), ATTN_OK);
    attn_kv_cache_free(c);
}

int main(void) {
    test_prefill_decode();
    test_gap();
    test_errors();
    return check_done("test_kv_docs");
}

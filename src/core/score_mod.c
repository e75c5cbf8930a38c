/* The built-in score modifiers of the mask descriptor (soft-capping,
 * ALiBi, attention sinks) and document ids (packed sequences): their
 * checks, the ALiBi slopes, and the document ranges the tile classifier
 * and the row passes use. The formulas are documented at attn_mask in
 * include/attn.h; every kernel takes them from here. */
#include "score_mod.h"

#include <math.h>

attn_status attn_alibi_slopes(int64_t H, double *slopes) {
    if (!slopes)
        return attn__fail(ATTN_E_INVALID, "alibi slopes: slopes is NULL");
    if (H < 1)
        return attn__fail(ATTN_E_INVALID, "alibi slopes: H is %lld (< 1)",
                          (long long)H);
    int64_t n = 1;
    while (n * 2 <= H) n *= 2;
    for (int64_t k = 0; k < H; k++)
        slopes[k] = k < n ? exp2(-8.0 * (double)(k + 1) / (double)n)
                          : exp2(-4.0 * (double)(2 * (k - n) + 1) / (double)n);
    return ATTN_OK;
}

double attn__alibi_slope(const attn_mask *m, int64_t H, int64_t h) {
    if (m->alibi_slopes) return m->alibi_slopes[h];
    int64_t n = 1;
    while (n * 2 <= H) n *= 2;
    return h < n ? exp2(-8.0 * (double)(h + 1) / (double)n)
                 : exp2(-4.0 * (double)(2 * (h - n) + 1) / (double)n);
}

double attn__alibi_at(const attn_mask *m, int64_t b, int64_t H, int64_t h,
                      int64_t i, int64_t j, int64_t Lq, int64_t Lk) {
    if (!m->alibi) return 0.0;
    int64_t lq, lk;
    attn__lengths(m, b, Lq, Lk, &lq, &lk);
    int64_t c = i + (m->align == ATTN_ALIGN_BOTTOM_RIGHT ? lk - lq : 0);
    double dist = (double)(c - j);
    if (m->alibi == ATTN_ALIBI_SYMMETRIC) dist = fabs(dist);
    return -attn__alibi_slope(m, H, h) * dist;
}

/* Finite entries of a per-head array, named in the message. */
static attn_status check_heads(const double *x, int64_t n, int64_t H,
                               const char *name) {
    if (n != H)
        return attn__fail(ATTN_E_SHAPE,
                          "mask.%s has %lld entries (n_%s) but the attention "
                          "has %lld heads",
                          name, (long long)n, name, (long long)H);
    for (int64_t h = 0; h < H; h++)
        if (!isfinite(x[h]))
            return attn__fail(ATTN_E_NONFINITE, "mask.%s[%lld] is %g", name,
                              (long long)h, x[h]);
    return ATTN_OK;
}

/* Length and order of one document-id array of shape (B, L). */
static attn_status check_docs(const int64_t *ids, int64_t n, int64_t B,
                              int64_t L, const char *name) {
    if (n != B * L)
        return attn__fail(ATTN_E_SHAPE,
                          "mask.%s has %lld entries (n_%s) but B x L = %lld x "
                          "%lld = %lld are needed",
                          name, (long long)n, name, (long long)B, (long long)L,
                          (long long)(B * L));
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 1; i < L; i++)
            if (ids[b * L + i] < ids[b * L + i - 1])
                return attn__fail(ATTN_E_INVALID,
                                  "mask.%s decreases in entry %lld: position "
                                  "%lld has id %lld after %lld (ids must not "
                                  "decrease: documents are packed in order)",
                                  name, (long long)b, (long long)i,
                                  (long long)ids[b * L + i],
                                  (long long)ids[b * L + i - 1]);
    return ATTN_OK;
}

attn_status attn__score_mod_check(const attn_mask *m, int64_t B, int64_t H,
                                  int64_t Lq, int64_t Lk) {
    attn_status st;
    if (isnan(m->softcap) || m->softcap < 0 || isinf(m->softcap))
        return attn__fail(ATTN_E_INVALID,
                          "mask.softcap is %g; it must be a "
                          "positive cap (or 0 for none)",
                          m->softcap);
    if (m->alibi != ATTN_ALIBI_NONE && m->alibi != ATTN_ALIBI_CAUSAL &&
        m->alibi != ATTN_ALIBI_SYMMETRIC)
        return attn__fail(ATTN_E_INVALID,
                          "mask.alibi is %d: use "
                          "ATTN_ALIBI_NONE, _CAUSAL or _SYMMETRIC",
                          m->alibi);
    if (m->alibi_slopes && !m->alibi)
        return attn__fail(ATTN_E_INVALID, "mask.alibi_slopes is given but "
                                          "mask.alibi is ATTN_ALIBI_NONE");
    if (m->alibi_slopes && (st = check_heads(m->alibi_slopes, m->n_alibi_slopes,
                                             H, "alibi_slopes")))
        return st;
    if (m->sinks_grad && !m->sinks)
        return attn__fail(ATTN_E_INVALID, "mask.sinks_grad is given but "
                                          "mask.sinks is NULL");
    if (m->sinks && (st = check_heads(m->sinks, m->n_sinks, H, "sinks")))
        return st;
    if (m->doc_k && !m->doc_q)
        return attn__fail(ATTN_E_INVALID, "mask.doc_k is given but mask.doc_q "
                                          "is NULL");
    if (m->doc_q) {
        if (!m->doc_k && Lq != Lk)
            return attn__fail(
                ATTN_E_INVALID,
                "mask.doc_q alone serves Lq == Lk; with Lq = %lld "
                "and Lk = %lld give mask.doc_k too",
                (long long)Lq, (long long)Lk);
        if ((st = check_docs(m->doc_q, m->n_doc_q, B, Lq, "doc_q"))) return st;
        if (m->doc_k && (st = check_docs(m->doc_k, m->n_doc_k, B, Lk, "doc_k")))
            return st;
    }
    return attn__user_mod_check(m, B, H, Lq, Lk);
}

attn_status attn_doc_ids_from_cu_seqlens(const int64_t *cu, int64_t n,
                                         int64_t L, int64_t *ids) {
    if (!cu || !ids)
        return attn__fail(ATTN_E_INVALID, "cu_seqlens: %s is NULL",
                          !cu ? "cu" : "ids");
    if (n < 1)
        return attn__fail(ATTN_E_INVALID,
                          "cu_seqlens: n is %lld; at least one document (n + "
                          "1 >= 2 starts) is needed",
                          (long long)n);
    if (cu[0] != 0)
        return attn__fail(ATTN_E_INVALID,
                          "cu_seqlens[0] is %lld; the first document starts at "
                          "0",
                          (long long)cu[0]);
    for (int64_t d = 0; d < n; d++)
        if (cu[d + 1] < cu[d])
            return attn__fail(ATTN_E_INVALID,
                              "cu_seqlens decreases: cu[%lld] = %lld after "
                              "cu[%lld] = %lld (cumulative starts never "
                              "decrease)",
                              (long long)(d + 1), (long long)cu[d + 1],
                              (long long)d, (long long)cu[d]);
    if (cu[n] != L)
        return attn__fail(ATTN_E_SHAPE,
                          "cu_seqlens ends at cu[%lld] = %lld but the sequence "
                          "has %lld positions",
                          (long long)n, (long long)cu[n], (long long)L);
    for (int64_t d = 0; d < n; d++)
        for (int64_t j = cu[d]; j < cu[d + 1]; j++) ids[j] = d;
    return ATTN_OK;
}

/* First index in x[lo, hi) with x >= v (upper: x > v). */
static int64_t bound(const int64_t *x, int64_t lo, int64_t hi, int64_t v,
                     int upper) {
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (upper ? x[mid] <= v : x[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void attn__doc_range(const attn_mask *m, int64_t b, int64_t i, int64_t Lq,
                     int64_t Lk, int64_t *lo, int64_t *hi) {
    if (!m->doc_q || *hi <= *lo) return;
    const int64_t *dk = attn__doc_k_row(m, b, Lk);
    const int64_t id = attn__doc_q_row(m, b, Lq)[i];
    int64_t a = bound(dk, *lo, *hi, id, 0), e = bound(dk, a, *hi, id, 1);
    *lo = a;
    *hi = e > a ? e : a;
}

void attn__doc_hull(const attn_mask *m, int64_t b, int64_t i0, int64_t i1,
                    int64_t Lq, int64_t Lk, int64_t *lo, int64_t *hi) {
    if (!m->doc_q || *hi <= *lo || i1 <= i0) return;
    const int64_t *dq = attn__doc_q_row(m, b, Lq),
                  *dk = attn__doc_k_row(m, b, Lk);
    int64_t a = bound(dk, *lo, *hi, dq[i0], 0);
    int64_t e = bound(dk, a, *hi, dq[i1 - 1], 1);
    *lo = a;
    *hi = e > a ? e : a;
}

attn__tile_class attn__doc_classify(const attn_mask *m, int64_t b, int64_t i0,
                                    int64_t i1, int64_t j0, int64_t j1,
                                    int64_t Lq, int64_t Lk) {
    if (!m->doc_q) return ATTN__TILE_FULL;
    const int64_t *dq = attn__doc_q_row(m, b, Lq),
                  *dk = attn__doc_k_row(m, b, Lk);
    if (dq[i1 - 1] < dk[j0] || dk[j1 - 1] < dq[i0]) return ATTN__TILE_EMPTY;
    if (dq[i0] == dq[i1 - 1] && dk[j0] == dk[j1 - 1] && dq[i0] == dk[j0])
        return ATTN__TILE_FULL;
    /* the ranges overlap: look for a document present on both sides, one
     * distinct query id at a time */
    for (int64_t i = i0; i < i1; i = bound(dq, i, i1, dq[i], 1)) {
        int64_t a = bound(dk, j0, j1, dq[i], 0);
        if (a < j1 && dk[a] == dq[i]) return ATTN__TILE_PARTIAL;
    }
    return ATTN__TILE_EMPTY;
}

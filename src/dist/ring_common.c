/* What the ring forward and backward share: the checks every rank agrees
 * on (so that a bad argument anywhere is an error everywhere, never a rank
 * waiting for a message that does not come), the geometry of the blocks,
 * and chunked nonblocking transfers. */
#include "dist.h"
#include "rope.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* ---- local checks ------------------------------------------------------ */

/* A copy of t with axis 2 of length n (0 rows become 1 for the checks). */
static attn_tensor with_rows(const attn_tensor *t, int64_t n) {
    attn_tensor x = *t;
    x.shape[2] = n;
    return x;
}

attn_status attn__ring_local_check(attn_ring_layout layout,
                                   const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v,
                                   const attn_sdpa_opts *opts,
                                   attn__sdpa_dims *d) {
    if (layout != ATTN_RING_CONTIGUOUS && layout != ATTN_RING_ZIGZAG)
        return attn__fail(ATTN_E_INVALID,
                          "ring layout is %d: use "
                          "ATTN_RING_CONTIGUOUS or ATTN_RING_ZIGZAG",
                          (int)layout);
    if (!opts) return attn__fail(ATTN_E_INVALID, "opts is NULL");
    if (!q || !k || !v)
        return attn__fail(ATTN_E_INVALID, "%s is NULL",
                          !q   ? "q"
                          : !k ? "k"
                               : "v");
    const attn_mask *m = &opts->mask;
    if (m->keep || m->bias || m->block_size || m->random_block)
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "ring attention serves causal, window, length and "
                          "document masks with soft-capping, ALiBi and sinks; "
                          "mask.%s is set",
                          m->keep         ? "keep"
                          : m->bias       ? "bias"
                          : m->block_size ? "block_size"
                                          : "random_block");
    if (opts->impl == ATTN_IMPL_REF)
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "ring attention runs the flash "
                          "kernel: impl must be AUTO or FLASH, not REF");
    /* the lengths are positions of the full sequence: checked collectively;
     * a shard of 0 rows passes here and is named there */
    attn_sdpa_opts o = *opts;
    o.mask.key_lengths = NULL;
    o.mask.query_lengths = NULL;
    /* so are the document ids: arrays of the full sequence, like lengths */
    o.mask.doc_q = o.mask.doc_k = NULL;
    o.mask.n_doc_q = o.mask.n_doc_k = 0;
    /* and a block mask: built over the full sequence */
    o.mask.block_mask = NULL;
    /* and the rotary positions (the rotation itself is checked here) */
    o = attn__opts_without_rope(&o);
    if (opts->rope) {
        attn_status rs = attn_rope_check(opts->rope, q->shape[3]);
        if (rs) return rs;
    }
    attn_tensor q1 = with_rows(q, q->shape[2] == 0 ? 1 : q->shape[2]);
    attn_tensor k1 = with_rows(k, k->shape[2] == 0 ? 1 : k->shape[2]);
    attn_tensor v1 = with_rows(v, v->shape[2] == 0 ? 1 : v->shape[2]);
    if (q->shape[2] == 0 || k->shape[2] == 0) {
        /* no data to read: check the shapes only */
        attn_status st;
        if ((st = attn_tensor_check(&q1, "q")) ||
            (st = attn_tensor_check(&k1, "k")) ||
            (st = attn_tensor_check(&v1, "v")))
            return st;
        if (v->shape[2] != k->shape[2])
            return attn__fail(ATTN_E_SHAPE,
                              "v has %lld positions but k has %lld",
                              (long long)v->shape[2], (long long)k->shape[2]);
        memset(d, 0, sizeof *d);
        d->B = q->shape[0];
        d->H = q->shape[1];
        d->Hkv = k->shape[1];
        d->Lq = q->shape[2];
        d->Lk = k->shape[2];
        d->Dk = q->shape[3];
        d->Dv = v->shape[3];
        return ATTN_OK;
    }
    attn_status st = attn__sdpa_check(q, k, v, &o, NULL, NULL, 0, d);
    if (st) return st;
    return attn__flash_check_dims(d, "ring");
}

/* ---- agreement ----------------------------------------------------------- */

/* What every rank tells the others. */
enum {
    F_STATUS,
    F_B,
    F_H,
    F_HKV,
    F_DK,
    F_DV,
    F_DTYPE,
    F_CAUSAL,
    F_ALIGN,
    F_WL,
    F_WR,
    F_DROPOUT,
    F_SEED,
    F_SCALE,
    F_LAYOUT,
    F_KLEN,
    F_QLEN,
    F_SOFTCAP,
    F_ALIBI,
    F_SLOPES,
    F_SINKS,
    F_NDOCQ,
    F_NDOCK,
    F_USER,
    F_ROPE,
    F_NRQPOS,
    F_NRKPOS,
    F_NQ,
    F_NK,
    F_COUNT
};
/* The fields that must agree, from F_B to F_QLEN, in words. */
static const char *const field_name[F_COUNT] = {
    "",
    "the batch size",
    "the number of query heads",
    "the number of key/value heads",
    "Dk (q and k features)",
    "Dv (v features)",
    "the dtype",
    "opts.mask.causal",
    "opts.mask.align",
    "opts.mask.window_left",
    "opts.mask.window_right",
    "opts.dropout_p",
    "opts.seed",
    "opts.scale",
    "the layout",
    "opts.mask.key_lengths",
    "opts.mask.query_lengths",
    "opts.mask.softcap",
    "opts.mask.alibi",
    "opts.mask.alibi_slopes",
    "opts.mask.sinks",
    "opts.mask.n_doc_q",
    "opts.mask.n_doc_k",
    "the user functions (score_mod, "
    "mask_mod, block_mask: each "
    "given on every rank or none)",
    "opts.rope (its style, theta, rotary_dim and scaling)",
    "opts.n_rope_q_positions",
    "opts.n_rope_k_positions",
    "",
    ""};

static int64_t bits_of(double x) {
    int64_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

/* FNV-1a of n lengths (0 for none), so that ranks can compare arrays. */
static int64_t hash_lengths(const int64_t *x, int64_t n) {
    if (!x) return 0;
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < n; i++) {
        h ^= (uint64_t)x[i];
        h *= 1099511628211ull;
    }
    return (int64_t)(h | 1); /* never 0 */
}

/* The same over the bits of n doubles (0 for none). */
static int64_t hash_doubles(const double *x, int64_t n) {
    if (!x) return 0;
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < n; i++) {
        h ^= (uint64_t)bits_of(x[i]);
        h *= 1099511628211ull;
    }
    return (int64_t)(h | 1);
}

/* The rotation's settings (0 for none). */
static int64_t hash_rope(const attn_rope *r) {
    if (!r) return 0;
    const double x[8] = {(double)r->style,
                         r->theta,
                         (double)r->rotary_dim,
                         (double)r->scaling,
                         r->factor,
                         r->low_freq_factor,
                         r->high_freq_factor,
                         r->original_max_position};
    return hash_doubles(x, 8);
}

#define MSG_LEN 512

/* The message of rank root, on every rank, as this rank's error. */
static attn_status spread_error(MPI_Comm comm, int root, attn_status st) {
    char msg[MSG_LEN];
    memset(msg, 0, sizeof msg);
    int me;
    MPI_Comm_rank(comm, &me);
    if (me == root) {
        const char *e = attn_last_error();
        strncpy(msg, e ? e : "", MSG_LEN - 1);
    }
    MPI_Bcast(msg, MSG_LEN, MPI_CHAR, root, comm);
    msg[MSG_LEN - 1] = 0;
    return attn__fail(st, "ring: rank %d: %s", root, msg);
}

attn_status attn__ring_agree(const attn__ring *c, attn_status st) {
    int mine = st ? c->rank : c->P, first = c->P;
    if (MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, c->comm) !=
        MPI_SUCCESS)
        return attn__fail(ATTN_E_IO, "ring: MPI_Allreduce failed");
    if (first == c->P) return ATTN_OK;
    int code = (int)st;
    MPI_Bcast(&code, 1, MPI_INT, first, c->comm);
    return spread_error(c->comm, first, (attn_status)code);
}

static attn_status mpi_fail(int err, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(err, s, &n) != MPI_SUCCESS) n = 0;
    s[n < MPI_MAX_ERROR_STRING ? n : MPI_MAX_ERROR_STRING - 1] = 0;
    return attn__fail(ATTN_E_IO, "ring: %s failed: %s", what, s);
}

/* Shapes and options agree across ranks, lengths fit the layout, and the
 * mask fits the full sequence: the same verdict on every rank, since every
 * rank looks at the same table. */
static attn_status check_table(attn__ring *c, const int64_t *tab,
                               const attn_sdpa_opts *opts) {
    const int P = c->P;
    for (int r = 1; r < P; r++)
        for (int f = F_B; f <= F_NRKPOS; f++)
            if (tab[r * F_COUNT + f] != tab[f]) {
                if ((f >= F_DROPOUT && f <= F_SCALE) || f == F_SOFTCAP ||
                    f == F_SLOPES || f == F_SINKS || f == F_USER || f == F_ROPE)
                    return attn__fail(ATTN_E_SHAPE,
                                      "ring: rank %d and rank 0 "
                                      "differ in %s",
                                      r, field_name[f]);
                if (f == F_KLEN || f == F_QLEN || f == F_NDOCQ ||
                    f == F_NDOCK || f == F_NRQPOS || f == F_NRKPOS)
                    return attn__fail(ATTN_E_SHAPE,
                                      "ring: rank %d and rank 0 "
                                      "pass different %s (every rank passes "
                                      "the full sequence's lengths, "
                                      "document ids and positions)",
                                      r, field_name[f]);
                return attn__fail(ATTN_E_SHAPE,
                                  "ring: rank %d has %lld for %s "
                                  "but rank 0 has %lld",
                                  r, (long long)tab[r * F_COUNT + f],
                                  field_name[f], (long long)tab[f]);
            }
    int64_t Lq = 0, Lk = 0;
    for (int r = 0; r < P; r++) {
        c->qoff[r] = Lq;
        c->koff[r] = Lk;
        c->nq[r] = tab[r * F_COUNT + F_NQ];
        c->nk[r] = tab[r * F_COUNT + F_NK];
        Lq += c->nq[r];
        Lk += c->nk[r];
    }
    c->Lq = Lq;
    c->Lk = Lk;
    for (int r = 0; r < P; r++)
        if (c->nq[r] == 0 || c->nk[r] == 0)
            return attn__fail(ATTN_E_SHAPE,
                              "ring: rank %d holds no %s: %d ranks for a "
                              "sequence of %lld queries and %lld keys (each "
                              "rank needs at least one of each)",
                              r, c->nq[r] == 0 ? "queries" : "keys", P,
                              (long long)Lq, (long long)Lk);
    if (c->layout == ATTN_RING_ZIGZAG) {
        for (int pass = 0; pass < 2; pass++) {
            const int64_t L = pass ? Lk : Lq, *n = pass ? c->nk : c->nq;
            for (int r = 0; r < P; r++) {
                int64_t want;
                attn_status st =
                    attn_ring_shard_length(c->layout, L, P, r, &want);
                if (st) return st;
                if (n[r] != want)
                    return attn__fail(ATTN_E_SHAPE,
                                      "ring zigzag: rank %d holds %lld %s rows "
                                      "but the layout gives it %lld of %lld "
                                      "(chunks %d and %d of %d; see "
                                      "attn_ring_shard)",
                                      r, (long long)n[r],
                                      pass ? "key" : "query", (long long)want,
                                      (long long)L, r, 2 * P - 1 - r, 2 * P);
            }
        }
    }
    c->maxnk = 0;
    for (int r = 0; r < P; r++)
        if (c->nk[r] > c->maxnk) c->maxnk = c->nk[r];
    /* the document arrays' lengths, so that their contents can be read
     * (and compared) safely; the same verdict everywhere (the table's) */
    const attn_mask *m = &opts->mask;
    if (m->doc_q && m->n_doc_q != c->d.B * Lq)
        return attn__fail(ATTN_E_SHAPE,
                          "ring: mask.doc_q has %lld entries (n_doc_q) but the "
                          "full sequence needs B x Lq = %lld x %lld = %lld",
                          (long long)m->n_doc_q, (long long)c->d.B,
                          (long long)Lq, (long long)(c->d.B * Lq));
    if (m->doc_k && m->n_doc_k != c->d.B * Lk)
        return attn__fail(ATTN_E_SHAPE,
                          "ring: mask.doc_k has %lld entries (n_doc_k) but the "
                          "full sequence needs B x Lk = %lld x %lld = %lld",
                          (long long)m->n_doc_k, (long long)c->d.B,
                          (long long)Lk, (long long)(c->d.B * Lk));
    /* rotary positions, like the document ids: of the full sequence */
    for (int x = 0; x < 2; x++) {
        const int64_t *pos =
            x ? opts->rope_k_positions : opts->rope_q_positions;
        const int64_t n =
            x ? opts->n_rope_k_positions : opts->n_rope_q_positions;
        const int64_t L = x ? Lk : Lq;
        if (opts->rope && pos && n != L && n != c->d.B * L)
            return attn__fail(ATTN_E_SHAPE,
                              "ring: opts.n_rope_%c_positions is %lld but the "
                              "full sequence needs L = %lld or B x L = %lld",
                              x ? 'k' : 'q', (long long)n, (long long)L,
                              (long long)(c->d.B * L));
    }
    return ATTN_OK;
}

/* Collective, after check_table passed on every rank: the document ids
 * (arrays of the full sequence) are the same on every rank, then the mask
 * is checked against the full sequence (the same verdict everywhere, since
 * every rank now holds the same mask). */
static attn_status check_docs_and_mask(attn__ring *c,
                                       const attn_sdpa_opts *opts) {
    const attn_mask *m = &opts->mask;
    const int64_t *rq = opts->rope ? opts->rope_q_positions : NULL;
    const int64_t *rk = opts->rope ? opts->rope_k_positions : NULL;
    /* the presence and lengths of all four arrays agreed: every rank is
     * here or none */
    if (m->doc_q || m->doc_k || rq || rk) {
        enum { NA = 4 };
        static const char *const what[NA] = {
            "opts.mask.doc_q", "opts.mask.doc_k", "opts.rope_q_positions",
            "opts.rope_k_positions"};
        int64_t mine[NA] = {hash_lengths(m->doc_q, m->n_doc_q),
                            hash_lengths(m->doc_k, m->n_doc_k),
                            hash_lengths(rq, opts->n_rope_q_positions),
                            hash_lengths(rk, opts->n_rope_k_positions)};
        int64_t *all = malloc(sizeof(int64_t) * NA * (size_t)c->P);
        int ok = all != NULL, all_ok = 0;
        MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, c->comm);
        if (!all_ok) {
            free(all);
            return attn__fail(ATTN_E_NOMEM, "ring: the document and position "
                                            "hashes could not be allocated on "
                                            "some rank");
        }
        int err =
            MPI_Allgather(mine, NA, MPI_INT64_T, all, NA, MPI_INT64_T, c->comm);
        if (err != MPI_SUCCESS) {
            free(all);
            return mpi_fail(err, "MPI_Allgather");
        }
        for (int r = 1; r < c->P; r++)
            for (int x = 0; x < NA; x++)
                if (all[NA * r + x] != all[x]) {
                    free(all);
                    return attn__fail(ATTN_E_SHAPE,
                                      "ring: rank %d and rank 0 pass different "
                                      "%s (every rank passes the full "
                                      "sequence's %s)",
                                      r, what[x],
                                      x < 2 ? "document ids" : "positions");
                }
        free(all);
    }
    return attn_mask_check(m, c->d.B, c->d.H, c->Lq, c->Lk);
}

attn_status attn__ring_begin(MPI_Comm comm, attn_ring_layout layout,
                             attn_status local, const attn_tensor *q,
                             const attn_tensor *k, const attn_sdpa_opts *opts,
                             const attn__sdpa_dims *d, attn__ring *c) {
    memset(c, 0, sizeof *c);
    int err = MPI_Comm_dup(comm, &c->comm);
    if (err != MPI_SUCCESS) return mpi_fail(err, "MPI_Comm_dup");
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_size(c->comm, &c->P);
    MPI_Comm_rank(c->comm, &c->rank);
    c->next = (c->rank + 1) % c->P;
    c->prev = (c->rank + c->P - 1) % c->P;
    c->layout = layout;
    int64_t mine[F_COUNT];
    memset(mine, 0, sizeof mine);
    mine[F_STATUS] = local;
    if (!local) {
        const attn_mask *m = &opts->mask;
        mine[F_B] = d->B;
        mine[F_H] = d->H;
        mine[F_HKV] = d->Hkv;
        mine[F_DK] = d->Dk;
        mine[F_DV] = d->Dv;
        mine[F_DTYPE] = q->dtype;
        mine[F_CAUSAL] = m->causal;
        mine[F_ALIGN] = m->align;
        mine[F_WL] = m->window_left < 0 ? -1 : m->window_left;
        mine[F_WR] = m->window_right < 0 ? -1 : m->window_right;
        mine[F_DROPOUT] = bits_of(opts->dropout_p);
        mine[F_SEED] = opts->dropout_p > 0 ? (int64_t)opts->seed : 0;
        mine[F_SCALE] = bits_of(opts->scale);
        mine[F_LAYOUT] = layout;
        mine[F_KLEN] = hash_lengths(m->key_lengths, d->B);
        mine[F_QLEN] = hash_lengths(m->query_lengths, d->B);
        mine[F_SOFTCAP] = bits_of(m->softcap);
        mine[F_ALIBI] = m->alibi;
        /* n_alibi_slopes = n_sinks = H: checked by the local check */
        mine[F_SLOPES] = hash_doubles(m->alibi_slopes, d->H);
        mine[F_SINKS] = hash_doubles(m->sinks, d->H);
        mine[F_NDOCQ] = m->doc_q ? m->n_doc_q + 1 : 0;
        mine[F_NDOCK] = m->doc_k ? m->n_doc_k + 1 : 0;
        mine[F_USER] = (m->score_mod ? 1 : 0) | (m->mask_mod ? 2 : 0) |
                       (m->block_mask ? 4 : 0);
        mine[F_ROPE] = hash_rope(opts->rope);
        mine[F_NRQPOS] = opts->rope && opts->rope_q_positions
                             ? opts->n_rope_q_positions + 1
                             : 0;
        mine[F_NRKPOS] = opts->rope && opts->rope_k_positions
                             ? opts->n_rope_k_positions + 1
                             : 0;
        mine[F_NQ] = q->shape[2];
        mine[F_NK] = k->shape[2];
    }
    int64_t *tab = malloc(sizeof(int64_t) * F_COUNT * (size_t)c->P);
    c->nq = malloc(sizeof(int64_t) * 4 * (size_t)c->P);
    /* an allocation that fails on one rank must still join the gather */
    int ok = tab && c->nq, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, c->comm);
    if (!all_ok) {
        free(tab);
        attn__ring_end(c);
        return attn__fail(ATTN_E_NOMEM,
                          "ring: the rank table (%d ranks) could "
                          "not be allocated on some rank",
                          c->P);
    }
    c->nk = c->nq + c->P;
    c->qoff = c->nk + c->P;
    c->koff = c->qoff + c->P;
    err = MPI_Allgather(mine, F_COUNT, MPI_INT64_T, tab, F_COUNT, MPI_INT64_T,
                        c->comm);
    attn_status st = ATTN_OK;
    if (err != MPI_SUCCESS) {
        st = mpi_fail(err, "MPI_Allgather");
    } else {
        int first = -1;
        for (int r = 0; r < c->P && first < 0; r++)
            if (tab[r * F_COUNT + F_STATUS]) first = r;
        if (first >= 0) {
            st = spread_error(c->comm, first,
                              (attn_status)tab[first * F_COUNT + F_STATUS]);
        } else {
            c->d = *d;
            c->dt = q->dtype;
            c->es = attn_dtype_size(q->dtype);
            st = check_table(c, tab, opts);
        }
    }
    free(tab);
    /* check_table's verdict is the same on every rank */
    if (!st) st = check_docs_and_mask(c, opts);
    if (st) attn__ring_end(c);
    return st;
}

void attn__ring_end(attn__ring *c) {
    free(c->nq);
    c->nq = c->nk = c->qoff = c->koff = NULL;
    if (c->comm != MPI_COMM_NULL && c->comm != 0) MPI_Comm_free(&c->comm);
    c->comm = MPI_COMM_NULL;
}

attn_status attn__ring_pass_kv(const attn__ring *c, int s, char *kv, size_t kvb,
                               int tag, attn__ring_reqs *q) {
    if (s + 1 >= c->P) return ATTN_OK;
    const int src = (c->rank - s + c->P) % c->P;
    const int after = (c->rank - s - 1 + 2 * c->P) % c->P;
    char *cur = kv + (size_t)(s % 2) * kvb,
         *nxt = kv + (size_t)((s + 1) % 2) * kvb;
    attn_status st = attn__ring_irecv(c, nxt, attn__ring_kv_bytes(c, after),
                                      c->prev, tag, q);
    if (!st)
        st = attn__ring_isend(c, cur, attn__ring_kv_bytes(c, src), c->next, tag,
                              q);
    return st;
}

void attn__ring_stats_step(attn_ring_stats *stats, int s, double compute,
                           double waited, int computed) {
    if (!stats) return;
    stats->compute_s += compute;
    stats->wait_s += waited;
    stats->skipped += !computed;
    if (stats->step_compute_s) stats->step_compute_s[s] = compute;
    if (stats->step_wait_s) stats->step_wait_s[s] = waited;
}

void attn__ring_stats_begin(attn_ring_stats *stats) {
    if (!stats) return;
    double *sc = stats->step_compute_s, *sw = stats->step_wait_s;
    memset(stats, 0, sizeof *stats);
    stats->step_compute_s = sc;
    stats->step_wait_s = sw;
}

attn_status attn__ring_finish(attn__ring *c, attn_ring_stats *stats, double t0,
                              attn_status st) {
    if (stats) {
        stats->steps = c->P;
        stats->total_s = MPI_Wtime() - t0;
    }
    attn__ring_end(c);
    return st;
}

/* ---- geometry --------------------------------------------------------- */

static int runs_of(const attn__ring *c, int r, int64_t L, const int64_t *off,
                   const int64_t *n, int64_t start[2], int64_t len[2]) {
    if (c->layout == ATTN_RING_CONTIGUOUS) {
        start[0] = off[r];
        len[0] = n[r];
        return 1;
    }
    int cnt = 0;
    /* checked in begin: the lengths are the layout's */
    if (attn_ring_runs(c->layout, L, c->P, r, start, len, &cnt)) return 0;
    return cnt;
}

int attn__ring_qruns(const attn__ring *c, int r, int64_t start[2],
                     int64_t len[2]) {
    return runs_of(c, r, c->Lq, c->qoff, c->nq, start, len);
}

int attn__ring_kruns(const attn__ring *c, int r, int64_t start[2],
                     int64_t len[2]) {
    return runs_of(c, r, c->Lk, c->koff, c->nk, start, len);
}

int attn__ring_pair_empty(const attn__ring *c, const attn_mask *m, int64_t qs,
                          int64_t ql, int64_t ks, int64_t kl) {
    /* the ring's built-in masks (causal, window, lengths, documents) do
     * not depend on the head; a user mask_mod may (its block mask says) */
    const int64_t nh = m->mask_mod ? c->d.H : 1;
    for (int64_t b = 0; b < c->d.B; b++)
        for (int64_t h = 0; h < nh; h++)
            if (attn__mask_classify(m, b, h, qs, qs + ql, ks, ks + kl, c->Lq,
                                    c->Lk) != ATTN__TILE_EMPTY)
                return 0;
    return 1;
}

attn__sdpa_dims attn__ring_pair_dims(const attn__ring *c, int64_t ql,
                                     int64_t kl) {
    attn__sdpa_dims d = c->d;
    d.Lq = ql;
    d.Lk = kl;
    return d;
}

attn_tensor attn__ring_rows(const attn_tensor *t, int64_t r0, int64_t n) {
    attn_tensor x = *t;
    x.data = (char *)t->data +
             r0 * t->stride[2] * (int64_t)attn_dtype_size(t->dtype);
    x.shape[2] = n;
    return x;
}

/* ---- blocks -------------------------------------------------------------- */

size_t attn__ring_kv_bytes(const attn__ring *c, int r) {
    const attn__sdpa_dims *d = &c->d;
    return (size_t)(d->B * d->Hkv * c->nk[r] * (d->Dk + d->Dv)) * c->es;
}

/* Copies t (B, Hkv, n, D) into dst contiguous, element bytes as they are. */
static void pack(const attn_tensor *t, size_t es, char *dst) {
    const int64_t B = t->shape[0], H = t->shape[1], n = t->shape[2],
                  D = t->shape[3];
    const char *src = t->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < n; i++) {
                const int64_t o = attn__off(t, b, h, i, 0);
                if (t->stride[3] == 1 || D == 1) {
                    memcpy(dst, src + (size_t)o * es, (size_t)D * es);
                    dst += (size_t)D * es;
                } else {
                    for (int64_t e = 0; e < D; e++, dst += es)
                        memcpy(dst, src + (size_t)(o + e * t->stride[3]) * es,
                               es);
                }
            }
}

void attn__ring_pack_kv(const attn__ring *c, const attn_tensor *k,
                        const attn_tensor *v, void *buf) {
    const attn__sdpa_dims *d = &c->d;
    pack(k, c->es, buf);
    pack(v, c->es,
         (char *)buf + (size_t)(d->B * d->Hkv * k->shape[2] * d->Dk) * c->es);
}

void attn__ring_block_views(const attn__ring *c, void *buf, attn_dtype dt,
                            int64_t nk, int64_t r0, int64_t n, attn_tensor *K,
                            attn_tensor *V) {
    const attn__sdpa_dims *d = &c->d;
    const size_t es = attn_dtype_size(dt);
    attn_tensor k = attn_tensor_4d(buf, dt, d->B, d->Hkv, nk, d->Dk);
    attn_tensor v =
        attn_tensor_4d((char *)buf + (size_t)(d->B * d->Hkv * nk * d->Dk) * es,
                       dt, d->B, d->Hkv, nk, d->Dv);
    *K = attn__ring_rows(&k, r0, n);
    *V = attn__ring_rows(&v, r0, n);
}

/* ---- transfers ----------------------------------------------------------- */

#define PIECE ((size_t)1 << 30)

static attn_status post(const attn__ring *c, void *buf, size_t bytes, int peer,
                        int tag, attn__ring_reqs *q, int is_send) {
    for (size_t at = 0; at < bytes || (bytes == 0 && at == 0); at += PIECE) {
        if (q->n == ATTN__RING_MAXREQ)
            return attn__fail(ATTN_E_UNSUPPORTED,
                              "ring: a block of %zu bytes "
                              "is beyond %d messages of 1 GiB",
                              bytes, ATTN__RING_MAXREQ);
        int n = (int)(bytes - at < PIECE ? bytes - at : PIECE);
        int err = is_send ? MPI_Isend((char *)buf + at, n, MPI_BYTE, peer, tag,
                                      c->comm, &q->r[q->n])
                          : MPI_Irecv((char *)buf + at, n, MPI_BYTE, peer, tag,
                                      c->comm, &q->r[q->n]);
        if (err != MPI_SUCCESS)
            return mpi_fail(err, is_send ? "MPI_Isend" : "MPI_Irecv");
        q->n++;
        if (bytes == 0) break;
    }
    return ATTN_OK;
}

attn_status attn__ring_isend(const attn__ring *c, const void *buf, size_t bytes,
                             int dest, int tag, attn__ring_reqs *q) {
    return post(c, (void *)buf, bytes, dest, tag, q, 1);
}

attn_status attn__ring_irecv(const attn__ring *c, void *buf, size_t bytes,
                             int src, int tag, attn__ring_reqs *q) {
    return post(c, buf, bytes, src, tag, q, 0);
}

attn_status attn__ring_wait(attn__ring_reqs *q, double *waited) {
    if (q->n == 0) return ATTN_OK;
    double t0 = MPI_Wtime();
    int err = MPI_Waitall(q->n, q->r, MPI_STATUSES_IGNORE);
    if (waited) *waited += MPI_Wtime() - t0;
    q->n = 0;
    if (err != MPI_SUCCESS) return mpi_fail(err, "MPI_Waitall");
    return ATTN_OK;
}

void attn__ring_progress(attn__ring_reqs *a, attn__ring_reqs *b) {
    int done;
    if (a && a->n) MPI_Testall(a->n, a->r, &done, MPI_STATUSES_IGNORE);
    if (b && b->n) MPI_Testall(b->n, b->r, &done, MPI_STATUSES_IGNORE);
}

int64_t attn__ring_slice_override = 0;

int64_t attn__ring_slice(const attn__ring *c, const attn_sdpa_opts *opts,
                         int64_t n) {
    if (attn__ring_slice_override > 0)
        return attn__ring_slice_override < n ? attn__ring_slice_override : n;
    const int64_t t = opts->threads > 0 ? opts->threads : omp_get_max_threads();
    const int64_t bh = c->d.B * c->d.H > 0 ? c->d.B * c->d.H : 1;
    int64_t s = (n + 7) / 8, need = 256 * ((2 * t + bh - 1) / bh);
    if (s < 512) s = 512;
    if (s < need) s = need;
    s = (s + 255) / 256 * 256;
    return s < n ? s : n;
}

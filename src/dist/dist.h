/* Internal pieces of ring attention (src/dist/): the agreement of all ranks
 * on shapes and options, the ring's geometry (which positions each rank's
 * block holds), packed K/V blocks and chunked nonblocking transfers. Not
 * installed; linked into attn_dist only. */
#ifndef ATTN_DIST_INTERNAL_H
#define ATTN_DIST_INTERNAL_H

#include "attn_dist.h"
#include "internal.h"
#include "flash.h"

#include <stddef.h>

/* One call's view of the ring, the same on every rank after
 * attn__ring_begin. */
typedef struct {
    MPI_Comm comm;           /* a duplicate of the caller's, errors return */
    int P, rank, next, prev; /* ring neighbours: send to next, recv from prev */
    attn_ring_layout layout;
    attn__sdpa_dims d;    /* this rank's shapes (Lq = nq[rank], ...)      */
    int64_t Lq, Lk;       /* the full sequence                           */
    int64_t *nq, *nk;     /* rows of every rank [P] each                 */
    int64_t *qoff, *koff; /* contiguous layout: start of every rank [P]  */
    int64_t maxnk;        /* the longest key block                      */
    size_t es;            /* bytes of one q/k/v element                 */
    attn_dtype dt;
} attn__ring;

/* The runs of positions of rank r's query (or key) rows: returns their
 * number (1 or 2) with starts and lengths in the full sequence. */
int attn__ring_qruns(const attn__ring *c, int r, int64_t start[2],
                     int64_t len[2]);
int attn__ring_kruns(const attn__ring *c, int r, int64_t start[2],
                     int64_t len[2]);

/* Checks done by one rank alone: q, k, v (k/v with local lengths; a shard
 * of 0 rows is left to the collective check, which can name the sequence
 * length), opts (the ring's subset of masks), layout. Fills *d with this
 * rank's dims. */
attn_status attn__ring_local_check(attn_ring_layout layout,
                                   const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v,
                                   const attn_sdpa_opts *opts,
                                   attn__sdpa_dims *d);

/* Collective: every rank passes its local status (with its message set on
 * failure) and the inputs. If any rank failed, every rank returns the first
 * failing rank's status and message ("ring: rank R: ..."); otherwise the
 * shapes and options are compared across ranks, the layout's lengths and
 * the mask against the full sequence, with the same verdict on every rank.
 * On ATTN_OK, c is filled and must be released with attn__ring_end. */
attn_status attn__ring_begin(MPI_Comm comm, attn_ring_layout layout,
                             attn_status local, const attn_tensor *q,
                             const attn_tensor *k, const attn_sdpa_opts *opts,
                             const attn__sdpa_dims *d, attn__ring *c);

void attn__ring_end(attn__ring *c);

/* The bookends of a ring call: stats (NULL: none) zeroed but for the
 * caller's per-step arrays; at the end its step count and the time since
 * t0 filled in, c released (attn__ring_end) and st returned. */
void attn__ring_stats_begin(attn_ring_stats *stats);
attn_status attn__ring_finish(attn__ring *c, attn_ring_stats *stats, double t0,
                              attn_status st);

/* Collective after begin: every rank's status st (message set where it
 * failed) becomes the first failing rank's on every rank, as in begin. */
attn_status attn__ring_agree(const attn__ring *c, attn_status st);

/* ---- blocks and transfers ------------------------------------------- */

/* Bytes of rank r's packed K/V block: K (B, Hkv, nk_r, Dk) then
 * V (B, Hkv, nk_r, Dv), contiguous, in the input dtype. */
size_t attn__ring_kv_bytes(const attn__ring *c, int r);

/* Packs this rank's k and v into buf (attn__ring_kv_bytes(c, rank)). */
void attn__ring_pack_kv(const attn__ring *c, const attn_tensor *k,
                        const attn_tensor *v, void *buf);

/* Views of rows [r0, r0 + n) of a packed block of nk rows: K and V
 * (es-byte elements of dtype c->dt, or f32 for accumulators: pass dt). */
void attn__ring_block_views(const attn__ring *c, void *buf, attn_dtype dt,
                            int64_t nk, int64_t r0, int64_t n, attn_tensor *K,
                            attn_tensor *V);

/* Outstanding requests of one transfer direction. */
#define ATTN__RING_MAXREQ 64
typedef struct {
    MPI_Request r[ATTN__RING_MAXREQ];
    int n;
} attn__ring_reqs;

/* Nonblocking send / receive of bytes, cut into messages of at most 1 GiB
 * (MPI counts are int). ATTN_E_IO with MPI's message on failure. */
attn_status attn__ring_isend(const attn__ring *c, const void *buf, size_t bytes,
                             int dest, int tag, attn__ring_reqs *q);
attn_status attn__ring_irecv(const attn__ring *c, void *buf, size_t bytes,
                             int src, int tag, attn__ring_reqs *q);
/* Waits for every request of q; adds the seconds waited to *waited. */
attn_status attn__ring_wait(attn__ring_reqs *q, double *waited);

/* The K/V blocks' pass at step s over the double buffer kv (two blocks of
 * kvb bytes, step s computing on block s % 2): unless s is the last step,
 * the receive of the next block into the other half from prev and the
 * send of this one to next, posted on q with tag. */
attn_status attn__ring_pass_kv(const attn__ring *c, int s, char *kv, size_t kvb,
                               int tag, attn__ring_reqs *q);
/* Step s's compute and wait seconds, and whether its block was skipped,
 * into stats (NULL: none). */
void attn__ring_stats_step(attn_ring_stats *stats, int s, double compute,
                           double waited, int computed);

/* Lets MPI move the posted transfers (MPI_Testall on each list not NULL):
 * Open MPI progresses a large message only inside MPI calls, so the ring
 * computes in slices of query rows (attn__ring_slice) and calls this
 * between them; without it a block would move only once compute ends. */
void attn__ring_progress(attn__ring_reqs *a, attn__ring_reqs *b);

/* Query rows per compute slice for a run of n rows: about an eighth of
 * the run, at least 512 rows and enough 256-row tiles for the threads. */
int64_t attn__ring_slice(const attn__ring *c, const attn_sdpa_opts *opts,
                         int64_t n);
/* Rows per slice for tests (0 = the rule above). Not thread-safe. */
extern int64_t attn__ring_slice_override;

/* 1 if the mask hides every pair of (query run, key run) for every batch
 * entry: the pair is skipped. */
int attn__ring_pair_empty(const attn__ring *c, const attn_mask *m, int64_t qs,
                          int64_t ql, int64_t ks, int64_t kl);

/* Dims of a (query run, key run) pair: this rank's with Lq = ql, Lk = kl. */
attn__sdpa_dims attn__ring_pair_dims(const attn__ring *c, int64_t ql,
                                     int64_t kl);

/* Rows [r0, r0 + n) of t along axis 2 (a view; no copy). */
attn_tensor attn__ring_rows(const attn_tensor *t, int64_t r0, int64_t n);

/* ---- rotary positions (ring_rope.c) ----------------------------------- */

/* This rank's q and k rotated at their positions in the full sequence (v
 * as f32), for a ring that then runs without opts.rope. */
typedef struct {
    attn_tensor q, k, v;  /* f32 copies (v is the caller's when f32)     */
    int64_t *qpos, *kpos; /* [B * nq], [B * nk]: this rank's positions   */
    float *qk, *vbuf;     /* storage                                     */
    attn_sdpa_opts opts;  /* the caller's, without the rope              */
} attn__ring_rope;

/* Local (no MPI; the caller agrees the status): fills r, and switches c
 * to f32 blocks. */
attn_status attn__ring_rope_make(attn__ring *c, const attn_tensor *q,
                                 const attn_tensor *k, const attn_tensor *v,
                                 const attn_sdpa_opts *opts,
                                 attn__ring_rope *r);
void attn__ring_rope_free(attn__ring_rope *r);
/* dq += R^T gq and dk += R^T gk at this rank's positions. */
attn_status attn__ring_rope_grads(const attn__ring_rope *r,
                                  const attn_sdpa_opts *opts,
                                  const attn_tensor *gq, const attn_tensor *gk,
                                  attn_tensor *dq, attn_tensor *dk);

#endif /* ATTN_DIST_INTERNAL_H */

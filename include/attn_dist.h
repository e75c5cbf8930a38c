/* attn_dist.h: attention across processes (ring attention over MPI).
 *
 * Built only where MPI is found, into its own library (libattn_dist.a,
 * CMake target attn_dist), which links MPI and libattn; libattn itself never
 * needs MPI. Include this header after (or instead of) attn.h.
 *
 * The sequence axis (axis 2 of the (B, H, L, D) tensors) is split across
 * the P ranks of a communicator. Each rank passes its shard of Q, K and V;
 * the K/V blocks travel around the ring (rank r sends to r + 1 and receives
 * from r - 1) while every rank computes its queries against the block it
 * holds with the flash kernel, the transfer of the next block overlapped
 * with that compute (MPI_Isend / MPI_Irecv, double-buffered). Partial
 * results are merged by log-sum-exp. Every rank calls every function below
 * with the same options (checked): a bad argument on any rank is reported,
 * with the rank, by every rank, and nobody waits for a message that never
 * comes. MPI must be initialized by the caller. MPI is called only from
 * the calling thread, outside the kernels' OpenMP regions
 * (MPI_THREAD_FUNNELED is enough).
 *
 *     mpirun -np 4 ./prog        (each rank: its rows of Q, K, V)
 *     attn_ring_shard(ATTN_RING_ZIGZAG, P, rank, &Qfull, &Qmine);  ...
 *     attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG, &Qmine,
 *                            &Kmine, &Vmine, &opts, &Omine, lse, NULL);
 *     attn_ring_unshard(ATTN_RING_ZIGZAG, P, rank, &Omine, &Ofull);
 */
#ifndef ATTN_DIST_H
#define ATTN_DIST_H

#include "attn.h"

#include <mpi.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How a sequence of L positions is split over P ranks. */
typedef enum {
    /* rank r holds one run of rows, in rank order. The helpers below give
     * rank r L / P rows, plus one for the first L % P ranks; the ring
     * functions accept any lengths >= 1 (the positions are the running sum). */
    ATTN_RING_CONTIGUOUS = 0,
    /* the sequence cut into 2P chunks (sizes L / 2P, plus one for the
     * first L % 2P chunks); rank r holds chunks r and 2P - 1 - r, in that
     * order. Under a causal mask every rank then has the same work (the
     * contiguous layout gives the last rank about twice the average). The
     * ring functions require exactly these lengths, with L >= 2P. */
    ATTN_RING_ZIGZAG = 1
} attn_ring_layout;

/* The runs of positions rank `rank` of P holds of a sequence of L: up to
 * two (start[x], len[x]), in the order the shard stores them; *n is their
 * number (runs of length 0 are left out). Errors: ATTN_E_INVALID (unknown
 * layout, P < 1, rank outside [0, P), NULL outputs), ATTN_E_SHAPE (L < P
 * for contiguous, L < 2P for zigzag: a rank would hold nothing). */
ATTN_API attn_status attn_ring_runs(attn_ring_layout layout, int64_t L, int P,
                                    int rank, int64_t start[2], int64_t len[2],
                                    int *n);

/* Rows rank holds: the sum of attn_ring_runs's lengths. Errors as there. */
ATTN_API attn_status attn_ring_shard_length(attn_ring_layout layout, int64_t L,
                                            int P, int rank, int64_t *rows);

/* Copies rank's rows of full (B, H, L, D) along axis 2 into shard
 * (B, H, rows, D), which is overwritten; both any float dtype, converted
 * (full and shard may differ, e.g. f64 to f32). Errors: as attn_ring_runs,
 * ATTN_E_SHAPE (shard's shape), ATTN_E_DTYPE. No MPI involved. */
ATTN_API attn_status attn_ring_shard(attn_ring_layout layout, int P, int rank,
                                     const attn_tensor *full,
                                     attn_tensor *shard);

/* The inverse: writes shard (B, H, rows, D) into rank's rows of full
 * (B, H, L, D); other rows of full are left as they are. */
ATTN_API attn_status attn_ring_unshard(attn_ring_layout layout, int P, int rank,
                                       const attn_tensor *shard,
                                       attn_tensor *full);

/* Timings of one ring call on this rank (seconds, MPI_Wtime). */
typedef struct {
    double total_s;   /* the whole call, checks included                   */
    double compute_s; /* in the flash kernel and the merge                 */
    double wait_s;    /* waiting for transfers compute did not hide        */
    int steps;        /* ring steps (P)                                    */
    int skipped;      /* steps whose block the mask hides entirely: no
                         compute (the block is still passed on)           */
    /* per step, when not NULL (P entries, caller-owned): compute and wait */
    double *step_compute_s, *step_wait_s;
} attn_ring_stats;

/*
 * Ring forward of attn_sdpa_forward. On rank r of comm (P ranks):
 *
 *   q   (B, H,   nq_r, Dk)  rank r's query rows, f32, f16 or bf16
 *   k   (B, Hkv, nk_r, Dk)  rank r's key rows, same dtype
 *   v   (B, Hkv, nk_r, Dv)  rank r's value rows, same dtype
 *   out (B, H,   nq_r, Dv)  f32, overwritten: O of rank r's query rows
 *   lse [B * H * nq_r] contiguous or NULL: their log-sum-exp over all keys
 *   stats               NULL or filled with this rank's timings
 *
 * The full sequence has Lq = sum nq_r queries and Lk = sum nk_r keys, laid
 * out by `layout` (the same on every rank). opts is that of the full
 * attention and must be the same on every rank: scale, threads (per rank),
 * causal with either alignment, window, key_lengths and query_lengths (in
 * positions of the full sequence, B entries), dropout (the Philox stream of
 * the full sequence: the same weights are dropped as by attn_sdpa_forward
 * on the full tensors), and the score modifiers and documents of attn_mask:
 * softcap, alibi (with or without slopes: ALiBi's distances are those of
 * the full sequence), sinks (each row's sink joins its denominator once,
 * after the last block) and doc_q / doc_k, which like the lengths are
 * arrays of the full sequence (n_doc_q = B x Lq, n_doc_k = B x Lk, in
 * sequence order whatever the layout); a block that shares no document
 * with a rank's queries is not computed; and the user functions score_mod
 * and mask_mod, asked at positions of the full sequence (every rank must
 * pass the same functions), with block_mask built over the full sequence
 * (B, H, Lq, Lk); rotary positions (opts.rope: each rank rotates its q
 * and k rows at their positions in the full sequence, the defaults of
 * attn_sdpa_forward or rope_q_positions / rope_k_positions, which are
 * arrays of the full sequence, [L] or [B x L], the same on every rank;
 * the backward takes dq and dk back through the rotation). impl AUTO or
 * FLASH (the ring
 * always runs the flash kernel). The result agrees with attn_sdpa_forward
 * on the full tensors to rounding (the merge order differs).
 * Errors (returned by every rank, the message naming the rank at fault):
 * as attn_sdpa_forward; ATTN_E_SHAPE for shapes, dtypes or options that
 * differ across ranks, zigzag shards of the wrong length, a rank with no
 * rows; ATTN_E_UNSUPPORTED for keep masks, bias, block-sparse and random
 * block masks (the ring's mask is a function of positions and documents
 * only), IMPL_REF, f64; ATTN_E_IO when an MPI call fails (the
 * communicator's error handler is not changed: the ring works on a
 * duplicate that returns errors).
 */
ATTN_API attn_status attn_ring_sdpa_forward(
    MPI_Comm comm, attn_ring_layout layout, const attn_tensor *q,
    const attn_tensor *k, const attn_tensor *v, const attn_sdpa_opts *opts,
    attn_tensor *out, float *lse, attn_ring_stats *stats);

/*
 * Ring backward of attn_sdpa_backward: the K/V blocks travel around the
 * ring as in the forward and the dK/dV accumulators of each block travel
 * with them (each rank adds its queries' contribution), ending at the
 * block's owner. On rank r, with the shapes of attn_ring_sdpa_forward:
 *
 *   out, dout (B, H, nq_r, Dv)  f32: rank r's rows of O and of dO
 *   lse [B * H * nq_r]          from attn_ring_sdpa_forward (not NULL)
 *   dq (B, H, nq_r, Dk), dk (B, Hkv, nk_r, Dk), dv (B, Hkv, nk_r, Dv)
 *                               f32, ADDED INTO (rank r's rows)
 *
 * With opts.mask.sinks, dL/dsinks (H doubles) is summed over every rank's
 * query rows (in rank order: the same bits on every rank) and ADDED INTO
 * opts.mask.sinks_grad on each rank that passes one (it may be NULL on
 * some ranks).
 * Errors: as attn_ring_sdpa_forward, and as attn_sdpa_backward.
 */
ATTN_API attn_status attn_ring_sdpa_backward(
    MPI_Comm comm, attn_ring_layout layout, const attn_tensor *q,
    const attn_tensor *k, const attn_tensor *v, const attn_tensor *out,
    const float *lse, const attn_tensor *dout, const attn_sdpa_opts *opts,
    attn_tensor *dq, attn_tensor *dk, attn_tensor *dv, attn_ring_stats *stats);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_DIST_H */

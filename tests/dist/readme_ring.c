#include <attn_dist.h>
#include <stdio.h>
#include <stdlib.h>

/* Causal self-attention over 64 tokens split across the ranks of
 * mpirun -np P: each rank keeps its zigzag shard, the ring computes, and
 * rank 0 checks its rows against one process. */
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int P, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    enum { L = 64, D = 16 };
    static float x[L * D], ref[L * D];
    for (int i = 0; i < L * D; i++) x[i] = (float)((i * 37) % 101) / 101.0f;
    attn_tensor X = attn_tensor_4d(x, ATTN_F32, 1, 1, L, D);

    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    opts.mask.causal = 1;

    /* this rank's rows: chunks rank and 2P-1-rank of 2P */
    int64_t n;
    attn_ring_shard_length(ATTN_RING_ZIGZAG, L, P, rank, &n);
    float *xs = malloc(sizeof(float) * (size_t)(n * D));
    float *os = malloc(sizeof(float) * (size_t)(n * D));
    attn_tensor Xs = attn_tensor_4d(xs, ATTN_F32, 1, 1, n, D);
    attn_tensor Os = attn_tensor_4d(os, ATTN_F32, 1, 1, n, D);
    attn_ring_shard(ATTN_RING_ZIGZAG, P, rank, &X, &Xs);

    attn_status st = attn_ring_sdpa_forward(MPI_COMM_WORLD, ATTN_RING_ZIGZAG,
                                            &Xs, &Xs, &Xs, &opts, &Os, NULL, NULL);
    if (st != ATTN_OK) { /* every rank gets the same error */
        fprintf(stderr, "rank %d: %s\n", rank, attn_last_error());
        MPI_Finalize();
        return 1;
    }
    /* the same rows of a one-process run */
    attn_tensor R = attn_tensor_4d(ref, ATTN_F32, 1, 1, L, D);
    attn_sdpa_forward(&X, &X, &X, &opts, &R, NULL, NULL);
    float *rs = malloc(sizeof(float) * (size_t)(n * D));
    attn_tensor Rs = attn_tensor_4d(rs, ATTN_F32, 1, 1, n, D);
    attn_ring_shard(ATTN_RING_ZIGZAG, P, rank, &R, &Rs);
    double err = 0;
    for (int64_t i = 0; i < n * D; i++) {
        double e = os[i] > rs[i] ? os[i] - rs[i] : rs[i] - os[i];
        if (e > err) err = e;
    }
    if (rank == 0) printf("rank 0 of %d: %lld rows, max difference %.2g\n", P,
                          (long long)n, err);
    free(xs);
    free(os);
    free(rs);
    MPI_Finalize();
    return err < 1e-5 ? 0 : 1;
}

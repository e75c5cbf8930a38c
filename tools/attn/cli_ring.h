/* --ring for attn sdpa, sdpa-backward and bench (cli_ring.c,
 * cli_ring_bench.c): the ring attention of attn_dist.h under mpirun. In a
 * build without MPI every entry point is a usage error saying so. */
#ifndef ATTN_CLI_RING_H
#define ATTN_CLI_RING_H

#include "cli.h"

/* Removes "--ring LAYOUT" from argv (LAYOUT contiguous or zigzag) and sets
 * *layout to it, or to NULL when absent. 0, or the exit status of a usage
 * error. */
int cli_ring_take(const char *cmd, int *argc, char **argv, const char **layout);
/* The start of sdpa and sdpa-backward: *a initialized (free it with
 * cli_sdpa_args_free whatever the result), --ring taken, then the shared
 * options (cli_sdpa_args_parse). */
int cli_ring_sdpa_args(const char *cmd, int *argc, char **argv,
                       cli_sdpa_args *a, const char **layout);

/* attn sdpa --ring: q, k, v are the full inputs (read by every rank), opts
 * bound to them; rank 0 writes out (in out_dtype, the one-process
 * command's rule) and lse (f32) if lse_path. Returns the exit
 * status. Starts and ends MPI. */
int cli_ring_sdpa(const char *cmd, const char *layout, cli_tensor *q,
                  cli_tensor *k, cli_tensor *v, const attn_sdpa_opts *opts,
                  const char *out_path, const char *lse_path,
                  attn_dtype out_dtype);

/* attn sdpa-backward --ring: the ring forward, then the ring backward;
 * rank 0 writes dq, dk, dv, and dL/dsinks to dsinks_path when it is not
 * NULL (opts then has sinks). */
int cli_ring_backward(const char *cmd, const char *layout, attn_dtype out_dtype,
                      cli_tensor *q, cli_tensor *k, cli_tensor *v,
                      cli_tensor *dout, const attn_sdpa_opts *opts,
                      const char *dq_path, const char *dk_path,
                      const char *dv_path, const char *dsinks_path);

/* attn bench --ring LAYOUT [options]: argv without "--ring LAYOUT" is
 * passed with the layout as argv[0]'s companion (see cli_ring_bench.c). */
int cli_ring_bench(const char *layout, int argc, char **argv);

/* The size of the MPI job this process was launched in, from the
 * launcher's environment (0 when not under one), and its rank in *rank. */
int cli_mpi_world(int *rank);

/* 1 once this process has joined the ring (MPI started). */
int cli_ring_joined(void);

#ifdef ATTN_HAVE_MPI
#include "attn_dist.h"
/* Starts MPI (once) and gives the ring's size and this rank: waits at most
 * ATTN_RING_JOIN_TIMEOUT seconds (default 120) for every rank to join,
 * then exits 1 with a message. */
void cli_ring_init(int *P, int *R);
/* "zigzag" or "contiguous" (cli_ring_take checked it). */
attn_ring_layout cli_ring_layout(const char *s);
#endif

#endif

/* Internal pieces shared by the training files (src/train); not installed.
 * Tests include it to reach inside a trainer (e.g. to poison a weight). */
#ifndef ATTN_TRAIN_INTERNAL_H
#define ATTN_TRAIN_INTERNAL_H

#include "attn_train.h"
#include "../layers/layers.h"

/* Allocates the model's slice table (free with attn__free). */
attn_status attn__model_slices_alloc(const attn_model_config *cfg,
                                     attn_param_slice **slices, int64_t *n);

/* What both trainers (attn_trainer, attn_gen_trainer) hold beside their
 * configuration and batch buffers, and what a checkpoint stores beside
 * the configuration: the parameter block with its gradients and AdamW
 * moments, the step counter and the data RNG. */
typedef struct {
    attn_param_slice *slices;
    int64_t nslices;
    int64_t n;                     /* parameters                        */
    float *params, *grads, *m, *v; /* one block of 4 n floats           */
    int64_t step;                  /* steps done                        */
    attn_rng rng;                  /* draws the training batches        */
} attn__train_state;

/* With s->slices and s->nslices set (the table attn__alloc'ed, owned by
 * s from then on) and the rest zero: allocates the zeroed block for n
 * parameters, initializes the parameters from seed and seeds the data
 * stream. On failure attn__train_state_free still frees what s holds. */
attn_status attn__train_state_init(attn__train_state *s, int64_t n,
                                   uint64_t seed);
void attn__train_state_free(attn__train_state *s);
/* The end of a step once backward has filled s->grads: clipping, AdamW,
 * stats (accuracy of logits (B, L, V) against targets; stats may be NULL)
 * and the step count. Failures are relabeled as by attn__train_stopped. */
attn_status attn__train_state_update(attn__train_state *s,
                                     const attn_adamw_config *o, double loss,
                                     const float *logits,
                                     const int32_t *targets, int64_t B,
                                     int64_t L, int64_t V,
                                     attn_train_stats *stats);
/* Re-labels a failure of step s->step as "training stopped", keeping the
 * detail. */
attn_status attn__train_stopped(attn_status st, int64_t step, const char *what);

/* ATTN_OK for the dtypes a trainer's products run in (f32, bf16), else
 * ATTN_E_DTYPE naming the one asked for. */
attn_status attn__train_dtype_check(attn_dtype dtype);

/* The checks both trainers' configurations share: batch in [1, 2^20] and
 * steps >= 0 (sizes), threads >= 0 and the dtype (run). */
attn_status attn__train_sizes_check(int64_t batch, int64_t steps);
attn_status attn__train_run_check(int threads, attn_dtype dtype);

/* Both trainers' setters, on the fields of their configuration (NULL
 * when the trainer is NULL): set_steps also ends the learning rate's
 * decay with the run. */
attn_status attn__train_set_threads(int *field, int threads);
attn_status attn__train_set_dtype(attn_dtype *field, attn_dtype dtype);
attn_status attn__train_set_steps(int64_t *field, attn_adamw_config *optim,
                                  int64_t steps);

/* The layer options of step s->step: threads, the bf16 kernels when dtype
 * asks for them, dropout p drawn from the step's stream of seed. */
void attn__train_step_opts(const attn__train_state *s, int threads,
                           attn_dtype dtype, double dropout, uint64_t seed,
                           attn_layer_opts *o);
/* A step's loss st/loss checked (a failure relabeled as by
 * attn__train_stopped, a loss that is not finite refused), then the
 * gradients zeroed for backward. */
attn_status attn__train_loss_done(attn__train_state *s, attn_status st,
                                  double loss);

/* A trainer: configuration, its state (what a checkpoint holds), and
 * every buffer one step needs, allocated once. */
struct attn_trainer {
    attn_train_config cfg;
    attn__train_state s;
    int64_t L, V;              /* sequence length, output classes       */
    int32_t *tokens, *targets; /* (batch, L)                           */
    int64_t *lengths;          /* [batch]                               */
    float *logits, *dlogits;   /* (batch, L, V)                         */
    float *ws;                 /* model workspace for (batch, L)        */
};

/* Seeds of the independent streams derived from the user's seed. */
enum { ATTN__STREAM_DATA = 1, ATTN__STREAM_DROPOUT = 2, ATTN__STREAM_EVAL = 3 };
uint64_t attn__train_seed(uint64_t seed, uint64_t stream, uint64_t index);

/* Per-sequence accuracy of logits (B, L, V) against targets: adds the
 * target tokens, those predicted right, and the sequences with every
 * target right (a sequence without targets counts as right). */
void attn__batch_accuracy(const float *logits, const int32_t *targets,
                          int64_t B, int64_t L, int64_t V, int64_t *tokens,
                          int64_t *tokens_right, int64_t *seqs_right);

#endif

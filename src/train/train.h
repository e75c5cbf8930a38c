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

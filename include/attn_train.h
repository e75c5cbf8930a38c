/*
 * attn_train.h: training small Transformer tasks end to end, on top of
 * attn.h and attn_layers.h.
 *
 * Contents:
 *   Random numbers   attn_rng (xoshiro256**, saved in checkpoints)
 *   Tasks            attn_task (reverse, copy, sort, add)
 *   Model            attn_model_config, attn_model_forward/backward
 *   Loss, optimizer  attn_cross_entropy, attn_clip_grad_norm, attn_adamw_*
 *   Trainer          attn_train_config, attn_trainer_create/step/free,
 *                    checkpoints (attn_trainer_save/load)
 *   Evaluation       attn_model_evaluate
 *
 * Example: a few steps of the copy task.
 *
 *     attn_train_config cfg;
 *     attn_train_config_init(&cfg, ATTN_TASK_COPY);
 *     cfg.steps = 3;
 *     attn_trainer *tr;
 *     attn_train_stats s;
 *     if (attn_trainer_create(&cfg, &tr)) {
 *         fprintf(stderr, "%s\n", attn_last_error());
 *         return 1;
 *     }
 *     for (int i = 0; i < 3; i++)
 *         if (attn_trainer_step(tr, &s)) {
 *             fprintf(stderr, "%s\n", attn_last_error());
 *             attn_trainer_free(tr);
 *             return 1;
 *         }
 *     printf("step %lld loss %.3f\n", (long long)s.step, s.loss);
 *     attn_trainer_free(tr);
 */
#ifndef ATTN_TRAIN_H
#define ATTN_TRAIN_H

#include "attn.h"
#include "attn_layers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================== */
/* Training                                                    */
/* ===================================================================== */
/*
 * Small Transformer tasks trained end to end: a token embedding (times
 * sqrt(E)) plus sinusoidal positions, an encoder stack, and a linear head
 * that predicts one output token per position. Loss: softmax cross-entropy
 * with an ignore index. Optimizer: AdamW with linear warmup, cosine decay
 * and global-norm clipping. Everything is deterministic: the same seed
 * gives bitwise the same model on any thread count, and a run resumed from
 * a checkpoint is bitwise the uninterrupted one.
 *
 *     attn_train_config tc;
 *     attn_train_config_init(&tc, ATTN_TASK_REVERSE);   // tuned defaults
 *     attn_trainer *tr;
 *     if (attn_trainer_create(&tc, &tr)) ...;
 *     for (int64_t s = 0; s < tc.steps; s++) {
 *         attn_train_stats st;
 *         if (attn_trainer_step(tr, &st)) break;        // NaN stops here
 *     }
 *     attn_trainer_save(tr, "model.bin");               // atomic, CRC32
 *     attn_trainer_free(tr);
 */

/* --- Random numbers --------------------------------------------------- */

/* xoshiro256** state, seeded through splitmix64; part of a checkpoint. */
typedef struct {
    uint64_t s[4];
} attn_rng;

ATTN_API void attn_rng_seed(attn_rng *rng, uint64_t seed);
ATTN_API uint64_t attn_rng_next(attn_rng *rng);
/* Uniform integer in [0, n) (n >= 1), without modulo bias. */
ATTN_API uint64_t attn_rng_below(attn_rng *rng, uint64_t n);

/* --- Tasks ------------------------------------------------------------ */
/*
 * Token ids: 0 .. vocab-1 are symbols (digits for add), vocab is PAD,
 * vocab+1 is SEP ('+' of add). The head predicts symbols only
 * (vocab_out = vocab). A target of ATTN_IGNORE_INDEX marks a position
 * without an answer (padding, operands of add past the sum).
 *
 *   reverse  x_0 .. x_{n-1}        -> targets x_{n-1} .. x_0
 *   copy     x_0 .. x_{n-1}        -> targets x_0 .. x_{n-1}
 *   sort     x_0 .. x_{n-1}        -> targets the x sorted ascending
 *   add      a_0 .. a_{n-1} SEP b_0 .. b_{n-1}   (digits least significant
 *            first, n digits each, leading zeros kept) -> targets
 *            s_0 .. s_n at positions 0 .. n (s = a + b, least significant
 *            first; s_n is the carry, read at the SEP position); the other
 *            positions are ignored. Whole-sum accuracy = sequence accuracy.
 * n is drawn uniformly in [min_len, max_len] per sequence (digits per
 * operand for add); a batch is padded with PAD to attn_task_seq_len and
 * lengths[b] gives the valid tokens (keys past it are masked).
 */
typedef enum {
    ATTN_TASK_REVERSE = 0,
    ATTN_TASK_COPY = 1,
    ATTN_TASK_SORT = 2,
    ATTN_TASK_ADD = 3
} attn_task_kind;

#define ATTN_TASK_COUNT 4
#define ATTN_IGNORE_INDEX (-1)

typedef struct {
    attn_task_kind kind;
    int64_t vocab;   /* symbols, >= 2 (add: the base, 2 .. 36)           */
    int64_t min_len; /* shortest sequence (add: digits per operand), >= 1 */
    int64_t max_len; /* longest, >= min_len                              */
} attn_task;

/* Defaults: vocab 10, lengths 16..16 (add: 3..3 digits). */
ATTN_API void attn_task_init(attn_task *task, attn_task_kind kind);
/* "reverse", "copy", "sort", "add" ("?" if unknown). */
ATTN_API const char *attn_task_name(attn_task_kind kind);
/* Parses a task name; ATTN_E_INVALID listing the names if unknown. */
ATTN_API attn_status attn_task_parse(const char *name, attn_task_kind *kind);
ATTN_API attn_status attn_task_check(const attn_task *task);
/* Padded sequence length L: max_len, or 2 max_len + 1 for add. */
ATTN_API int64_t attn_task_seq_len(const attn_task *task);
/* Input ids vocab + 2 (PAD, SEP); output classes vocab. */
ATTN_API int64_t attn_task_vocab_in(const attn_task *task);
ATTN_API int64_t attn_task_vocab_out(const attn_task *task);

/* B fresh examples drawn from rng: tokens and targets (B, L) int32 with
 * L = attn_task_seq_len, lengths [B] (valid tokens), all overwritten. */
ATTN_API attn_status attn_task_batch(const attn_task *task, attn_rng *rng,
                                     int64_t B, int32_t *tokens,
                                     int32_t *targets, int64_t *lengths);

/* The answer for one given input: tokens[0 .. n) (n <= L, no PAD; add:
 * the full layout) -> targets[0 .. n) as attn_task_batch would give.
 * ATTN_E_INVALID if the input does not fit the task. */
ATTN_API attn_status attn_task_solve(const attn_task *task,
                                     const int32_t *tokens, int64_t n,
                                     int32_t *targets);

/* --- Model ------------------------------------------------------------ */

typedef struct {
    attn_encoder_config enc; /* E = enc.d_model, layers, heads, ...       */
    int64_t vocab_in;        /* input ids 0 .. vocab_in-1                 */
    int64_t vocab_out;       /* classes of the head                      */
    int64_t max_len;         /* longest L the model is asked to run       */
} attn_model_config;

/* Block layout: embed (vocab_in, E), the encoder block (prefix "enc."),
 * head.w (vocab_out, E), head.b (vocab_out). */
/* ATTN_E_INVALID naming the field of a bad config (the encoder's too). */
ATTN_API attn_status attn_model_check(const attn_model_config *cfg);
/* Number of floats of the parameter block (0 for an invalid config). */
ATTN_API int64_t attn_model_param_count(const attn_model_config *cfg);
/* Slice table: writes at most cap entries (slices may be NULL with cap 0),
 * *count = the number needed. */
ATTN_API attn_status attn_model_param_slices(const attn_model_config *cfg,
                                             attn_param_slice *slices,
                                             int64_t cap, int64_t *count);
/* Xavier (matrices and the embedding), zeros (biases, betas), ones
 * (gammas), from seed. */
ATTN_API attn_status attn_model_init(const attn_model_config *cfg,
                                     float *params, uint64_t seed);
/* Floats of the workspace of one forward + backward over (B, L) (>= 1 and
 * L <= max_len, else ATTN_E_SHAPE; ATTN_E_NOMEM if it overflows). */
ATTN_API attn_status attn_model_workspace_size(const attn_model_config *cfg,
                                               int64_t B, int64_t L,
                                               size_t *floats);
/*
 *   tokens (B, L) int32 in [0, vocab_in); lengths [B] in [1, L] or NULL
 *   (all L): keys past lengths[b] are masked (opts->mask.key_lengths is
 *   set from it; the rest of opts is passed to the encoder).
 *   logits (B, L, vocab_out) overwritten; weights NULL or
 *   (N, B, Hw, L, L) as attn_encoder_forward; ws saved for backward.
 */
ATTN_API attn_status attn_model_forward(
    const attn_model_config *cfg, const float *params, int64_t B, int64_t L,
    const int32_t *tokens, const int64_t *lengths, const attn_layer_opts *opts,
    float *logits, float *weights, float *ws);
/* dlogits (B, L, vocab_out); grads ADDED INTO. Same arguments as the
 * forward that filled ws. */
ATTN_API attn_status attn_model_backward(
    const attn_model_config *cfg, const float *params, int64_t B, int64_t L,
    const int32_t *tokens, const int64_t *lengths, const attn_layer_opts *opts,
    const float *dlogits, float *ws, float *grads);

/* --- Loss and optimizer ----------------------------------------------- */

/* Mean softmax cross-entropy over the n rows whose target is not
 * ignore_index (targets in [0, classes) otherwise, else ATTN_E_INVALID).
 * loss: the mean (0 if no row counts); dlogits (n, classes) or NULL:
 * OVERWRITTEN with d loss / d logits (zero rows for ignored targets);
 * counted, correct (or NULL): rows counted, rows whose argmax (first
 * maximum) is the target. NaN/Inf in logits: ATTN_E_NONFINITE. */
ATTN_API attn_status attn_cross_entropy(int64_t n, int64_t classes,
                                        const float *logits,
                                        const int32_t *targets,
                                        int32_t ignore_index, double *loss,
                                        float *dlogits, int64_t *counted,
                                        int64_t *correct);

typedef struct {
    double lr;           /* peak learning rate                            */
    double beta1, beta2; /* moment decays                                 */
    double eps;
    double weight_decay; /* decoupled, on Xavier-initialized slices only  */
    int64_t warmup;      /* steps of linear warmup from lr / warmup       */
    int64_t decay_steps; /* cosine decay to min_lr over steps warmup ..
                            decay_steps; <= warmup: constant after warmup */
    double min_lr;       /* floor of the decay                           */
    double clip_norm;    /* global gradient norm limit; <= 0: no clipping */
} attn_adamw_config;

/* lr 1e-3, betas 0.9 / 0.98, eps 1e-9, weight decay 0.01, warmup 100, no
 * decay, min_lr 0, clip_norm 1.0 (the tutorials' grad_clip). */
ATTN_API void attn_adamw_config_init(attn_adamw_config *cfg);
ATTN_API attn_status attn_adamw_check(const attn_adamw_config *cfg);
/* Learning rate of step (0-based). */
ATTN_API double attn_adamw_lr(const attn_adamw_config *cfg, int64_t step);
/* Global L2 norm of grads (summed in double, in order); if max_norm > 0 and
 * the norm exceeds it, grads are scaled by max_norm / norm. NaN/Inf in
 * grads: ATTN_E_NONFINITE (naming the first element), grads unchanged. */
ATTN_API attn_status attn_clip_grad_norm(float *grads, int64_t n,
                                         double max_norm, double *norm);
/* One AdamW update of params with grads (not clipped here), moments m and
 * v (n each, zero at step 0) updated in place; step is 0-based. Weight
 * decay applies to the slices whose init is ATTN_INIT_XAVIER. */
ATTN_API attn_status attn_adamw_step(const attn_adamw_config *cfg, int64_t step,
                                     const attn_param_slice *slices,
                                     int64_t nslices, int64_t n, float *params,
                                     const float *grads, float *m, float *v);

/* --- Trainer ---------------------------------------------------------- */

typedef struct {
    attn_task task;
    attn_model_config model; /* vocab_in/out, max_len follow the task    */
    attn_adamw_config optim;
    int64_t batch;  /* sequences per step                        */
    int64_t steps;  /* planned steps (the schedule's horizon)    */
    uint64_t seed;  /* init, data and dropout                    */
    double dropout; /* encoder dropout in training               */
    int threads;    /* OpenMP threads of the kernels (0: default);
                                not stored in checkpoints                 */
    /* ATTN_F32 (the default) or ATTN_BF16: mixed precision, the products
     * of the linear maps and of attention, forward and backward, on bf16
     * operands with f32 accumulation (ATTN_IMPL_FLASH_BF16 in the layers'
     * options) where the CPU has AVX512_BF16 (f32 elsewhere); parameters,
     * gradients, AdamW moments and the loss stay f32. Not stored in
     * checkpoints (they stay f32): a resumed run sets it again
     * (attn_trainer_set_dtype). */
    attn_dtype dtype;
} attn_train_config;

/* Task defaults and the model and optimizer settings chosen by experiment
 * for that task (see docs/training.md). */
ATTN_API void attn_train_config_init(attn_train_config *cfg,
                                     attn_task_kind kind);
/* Validates; sets the model's vocabularies and max_len from the task. */
ATTN_API attn_status attn_train_config_check(attn_train_config *cfg);

typedef struct {
    int64_t step;     /* steps done after this one                      */
    double loss;      /* mean cross-entropy of the batch                */
    double token_acc; /* of the batch's target tokens                   */
    double seq_acc;   /* sequences with every target right              */
    double grad_norm; /* before clipping                                */
    double lr;
    int64_t tokens; /* target tokens of the batch                     */
} attn_train_stats;

/* Opaque: model, gradients, optimizer moments, data RNG and step, with
 * every buffer of a step allocated once here. */
typedef struct attn_trainer attn_trainer;

/* A new trainer for cfg (checked as attn_train_config_check does, a
 * copy is kept) with a freshly initialized model at step 0; *out is the
 * caller's, freed with attn_trainer_free. ATTN_E_INVALID for a bad config,
 * ATTN_E_NOMEM when its buffers cannot be allocated. */
ATTN_API attn_status attn_trainer_create(const attn_train_config *cfg,
                                         attn_trainer **out);
/* One step: a fresh batch, forward, loss, backward, clipping, AdamW.
 * A NaN/Inf loss or gradient returns ATTN_E_NONFINITE with the step in the
 * message and leaves the model as it was before the step. */
ATTN_API attn_status attn_trainer_step(attn_trainer *tr,
                                       attn_train_stats *stats);
/* Steps done so far (0 for a new trainer; a loaded one continues). */
ATTN_API int64_t attn_trainer_steps_done(const attn_trainer *tr);
/* The trainer's own config (read-only, valid until it is freed). */
ATTN_API const attn_train_config *attn_trainer_config(const attn_trainer *tr);
/* The parameter block (attn_model_param_count floats); the pointer stays
 * valid until the trainer is freed. */
ATTN_API const float *attn_trainer_params(const attn_trainer *tr);
/* Kernel threads from now on (results do not depend on it). */
ATTN_API attn_status attn_trainer_set_threads(attn_trainer *tr, int threads);
/* The products' dtype from now on (ATTN_F32 or ATTN_BF16, see
 * attn_train_config.dtype); ATTN_E_DTYPE for others. */
ATTN_API attn_status attn_trainer_set_dtype(attn_trainer *tr, attn_dtype dtype);
/* The dtype the products run in: ATTN_BF16 where bf16 was asked for and
 * the CPU has AVX512_BF16 (ATTN_ISA may cap it), else ATTN_F32. */
ATTN_API attn_dtype attn_trainer_dtype(const attn_trainer *tr);
/* Changes the planned steps (the schedule) of a resumed run. */
ATTN_API attn_status attn_trainer_set_steps(attn_trainer *tr, int64_t steps);

/*
 * Checkpoint: config, step, data RNG, parameters and both AdamW moments,
 * closed by a CRC32 (docs/checkpoint-format.md). Written to a temporary
 * file in the same folder, fsync'ed and renamed over path, so path holds
 * the old or the new checkpoint, never a mix. Loading a truncated,
 * corrupted or foreign file is ATTN_E_FORMAT (ATTN_E_IO if unreadable).
 * A loaded trainer continues bitwise as the one that was saved.
 */
ATTN_API attn_status attn_trainer_save(const attn_trainer *tr,
                                       const char *path);
/* A new trainer from a checkpoint into *out (free with attn_trainer_free). */
ATTN_API attn_status attn_trainer_load(const char *path, attn_trainer **out);
/* Frees a trainer and its buffers; NULL is a no-op. */
ATTN_API void attn_trainer_free(attn_trainer *tr);

/* --- Evaluation -------------------------------------------------------- */

typedef struct {
    int64_t sequences, sequences_correct; /* all targets right           */
    int64_t tokens, tokens_correct;       /* target tokens               */
    double token_acc, seq_acc, loss;
} attn_eval_result;

/* Accuracy of a model on count fresh sequences of task drawn from seed
 * (a stream distinct from training's for any seed), no dropout. */
ATTN_API attn_status attn_model_evaluate(const attn_model_config *cfg,
                                         const float *params,
                                         const attn_task *task, int64_t count,
                                         uint64_t seed, int threads,
                                         attn_eval_result *res);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_TRAIN_H */

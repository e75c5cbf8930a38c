/* Training end to end: a short run on copy must learn; a run resumed from
 * a checkpoint is bitwise the uninterrupted one; truncated, corrupted and
 * foreign checkpoints are refused while the previous one survives a failed
 * write; 1, 2, 3 and 5 threads give the same model bitwise; NaN stops training
 * with ATTN_E_NONFINITE. */
#include "attn.h"
#include "attn_train.h"
#include "check.h"
#include "../train/train.h"

#include <cblas.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static char dir[256];

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k = 0;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static unsigned char *slurp(const char *path, long *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*size + 1);
    if (fread(b, 1, (size_t)*size, f) != (size_t)*size) *size = -1;
    fclose(f);
    return b;
}

static int same_file(const char *a, const char *b) {
    long na, nb;
    unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, (size_t)na) == 0;
    free(x);
    free(y);
    return same;
}

/* A small, quick configuration of task kind (variable lengths, padding). */
static attn_train_config small(attn_task_kind kind, attn_attention_type at) {
    attn_train_config c;
    attn_train_config_init(&c, kind);
    c.task.min_len = kind == ATTN_TASK_ADD ? 2 : 3;
    c.task.max_len = kind == ATTN_TASK_ADD ? 3 : 8;
    c.model.enc.num_layers = 1;
    c.model.enc.d_model = 32;
    c.model.enc.num_heads = 2;
    c.model.enc.dim_feedforward = 48;
    c.model.enc.attention = at;
    c.batch = 16;
    c.steps = 40;
    c.optim.lr = 3e-3;
    c.optim.warmup = 10;
    c.optim.decay_steps = c.steps;
    c.optim.min_lr = 3e-4;
    c.seed = 7;
    c.threads = 1;
    return c;
}

static attn_trainer *run(const attn_train_config *c, int64_t steps) {
    attn_trainer *t = NULL;
    CHECK_STATUS(attn_trainer_create(c, &t), ATTN_OK);
    if (!t) return NULL;
    for (int64_t s = 0; s < steps; s++) {
        attn_train_stats st;
        attn_status r = attn_trainer_step(t, &st);
        CHECK_STATUS(r, ATTN_OK);
        if (r) break;
        CHECK(st.step == s + 1 && st.tokens > 0 && st.loss >= 0);
    }
    return t;
}

/* Copy: a few hundred steps must reach 98% token accuracy on fresh data. */
static void learns_copy(int sanitized) {
    attn_train_config c = small(ATTN_TASK_COPY, ATTN_ATTENTION_DOT);
    c.steps = c.optim.decay_steps = sanitized ? 150 : 300;
    c.batch = 32;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    attn_trainer *t = run(&c, c.steps);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!t) return;
    attn_eval_result r;
    CHECK_STATUS(attn_model_evaluate(&attn_trainer_config(t)->model,
                                     attn_trainer_params(t), &c.task, 500, 99,
                                     1, &r),
                 ATTN_OK);
    printf("copy: %lld steps in %.2f s, fresh token accuracy %.4f, sequence "
           "accuracy %.4f\n",
           (long long)c.steps,
           (double)(t1.tv_sec - t0.tv_sec) +
               1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
           r.token_acc, r.seq_acc);
    CHECK(r.sequences == 500);
    CHECK_MSG(r.token_acc >= 0.98, "copy reached only %.4f token accuracy",
              r.token_acc);
    CHECK(r.seq_acc <= r.token_acc + 1e-12);
    /* an untrained model is near chance: the accuracy is the training's */
    attn_trainer *u = run(&c, 0);
    CHECK_STATUS(attn_model_evaluate(&attn_trainer_config(u)->model,
                                     attn_trainer_params(u), &c.task, 500, 99,
                                     1, &r),
                 ATTN_OK);
    CHECK_MSG(r.token_acc < 0.3, "untrained copy model scores %.4f",
              r.token_acc);
    attn_trainer_free(u);
    attn_trainer_free(t);
}

/* Save at step k, load, continue: bitwise the run that never stopped
 * (parameters, moments, RNG and step: the saved files are identical). */
static void resume_bitwise(attn_task_kind kind, attn_attention_type at,
                           double p) {
    attn_train_config c = small(kind, at);
    c.dropout = p;
    const int64_t total = 24, cut = 11;
    attn_trainer *a = run(&c, total);
    attn_trainer *b = run(&c, cut);
    if (!a || !b) return;
    const char *mid = tmp_path("mid.bin");
    CHECK_STATUS(attn_trainer_save(b, mid), ATTN_OK);
    attn_trainer_free(b);
    b = NULL;
    CHECK_STATUS(attn_trainer_load(mid, &b), ATTN_OK);
    if (!b) return;
    CHECK(attn_trainer_steps_done(b) == cut);
    CHECK(memcmp(attn_trainer_config(b), attn_trainer_config(a),
                 offsetof(attn_train_config, threads)) == 0);
    for (int64_t s = cut; s < total; s++)
        CHECK_STATUS(attn_trainer_step(b, NULL), ATTN_OK);
    const int64_t n = attn_model_param_count(&attn_trainer_config(a)->model);
    CHECK_MSG(memcmp(attn_trainer_params(a), attn_trainer_params(b),
                     sizeof(float) * n) == 0,
              "%s resumed at step %lld differs from the uninterrupted run",
              attn_task_name(kind), (long long)cut);
    const char *fa = tmp_path("a.bin"), *fb = tmp_path("b.bin");
    CHECK_STATUS(attn_trainer_save(a, fa), ATTN_OK);
    CHECK_STATUS(attn_trainer_save(b, fb), ATTN_OK);
    CHECK_MSG(same_file(fa, fb),
              "checkpoints of the resumed and uninterrupted "
              "%s runs differ",
              attn_task_name(kind));
    attn_trainer_free(a);
    attn_trainer_free(b);
    remove(mid);
    remove(fa);
    remove(fb);
}

/* Checkpoint refusals; a failed save leaves the previous file intact. */
static void checkpoint_files(void) {
    attn_train_config c = small(ATTN_TASK_REVERSE, ATTN_ATTENTION_DOT);
    attn_trainer *t = run(&c, 3);
    if (!t) return;
    const char *good = tmp_path("good.bin"), *bad = tmp_path("bad.bin");
    CHECK_STATUS(attn_trainer_save(t, good), ATTN_OK);
    long size;
    unsigned char *img = slurp(good, &size);
    CHECK(img && size > 100);
    attn_trainer *r = NULL;
    /* every truncation point class: empty, inside the header, inside the
     * floats, one byte short of the CRC */
    const long cuts[] = {0, 5, 40, 300, size / 2, size - 5, size - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        check_spit(bad, img, cuts[i]);
        CHECK_STATUS(attn_trainer_load(bad, &r), ATTN_E_FORMAT);
        CHECK(r == NULL);
    }
    check_spit(bad, img, size);
    FILE *f = fopen(bad, "ab");
    fputc(0, f);
    fclose(f);
    CHECK_STATUS(attn_trainer_load(bad, &r), ATTN_E_FORMAT); /* padded */
    /* one flipped bit anywhere: the CRC (or the magic) refuses it */
    const long flips[] = {0, 12, 20, size / 3, size - 2};
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        img[flips[i]] ^= 0x10;
        check_spit(bad, img, size);
        CHECK_STATUS(attn_trainer_load(bad, &r), ATTN_E_FORMAT);
        img[flips[i]] ^= 0x10;
    }
    check_spit(bad, img, size);
    CHECK_STATUS(attn_trainer_load(bad, &r), ATTN_OK);
    attn_trainer_free(r);
    r = NULL;
    CHECK_STATUS(attn_trainer_load(tmp_path("absent.bin"), &r), ATTN_E_IO);
    CHECK_STATUS(attn_trainer_load(NULL, &r), ATTN_E_INVALID);

    /* a save cut short (file size limit: the disk filling up mid-write)
     * fails with ATTN_E_IO, leaves no temporary file, and the previous
     * checkpoint still loads and equals what it was */
    for (int i = 0; i < 3; i++)
        CHECK_STATUS(attn_trainer_step(t, NULL), ATTN_OK);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = (rlim_t)(size / 2);
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    attn_status st = attn_trainer_save(t, good);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_DFL);
    CHECK_STATUS(st, ATTN_E_IO);
    long size2;
    unsigned char *img2 = slurp(good, &size2);
    CHECK_MSG(img2 && size2 == size && memcmp(img, img2, (size_t)size) == 0,
              "the previous checkpoint changed after a failed save");
    free(img2);
    CHECK_STATUS(attn_trainer_load(good, &r), ATTN_OK);
    CHECK(r && attn_trainer_steps_done(r) == 3);
    attn_trainer_free(r);
    r = NULL;
    /* a crash between write and rename leaves a temporary file, never a
     * half-written checkpoint under the name */
    char stray[600];
    snprintf(stray, sizeof stray, "%s.tmpAAAAAA", good);
    check_spit(stray, img, size / 3);
    CHECK_STATUS(attn_trainer_load(good, &r), ATTN_OK);
    attn_trainer_free(r);
    r = NULL;
    remove(stray);
    /* the next save replaces it whole */
    CHECK_STATUS(attn_trainer_save(t, good), ATTN_OK);
    CHECK_STATUS(attn_trainer_load(good, &r), ATTN_OK);
    CHECK(r && attn_trainer_steps_done(r) == 6);
    attn_trainer_free(r);
    CHECK_STATUS(attn_trainer_save(t, tmp_path("no/such/dir/x.bin")),
                 ATTN_E_IO);
    free(img);
    attn_trainer_free(t);
    remove(good);
    remove(bad);
}

/* The same seed gives bitwise the same model on 1, 2, 3 and 5 threads
 * (OpenMP inside the kernels and BLAS), with dropout on. */
static void threads_bitwise(attn_attention_type at) {
    attn_train_config c = small(ATTN_TASK_SORT, at);
    c.dropout = 0.1;
    c.model.enc.num_layers = 2;
    c.batch = 24;
    static const int nth[4] = {1, 2, 3, 5};
    float *p[4] = {NULL, NULL, NULL, NULL};
    CHECK_STATUS(attn_train_config_check(&c), ATTN_OK);
    const int64_t n = attn_model_param_count(&c.model);
    for (int k = 0; k < 4; k++) {
        /* OpenMP follows c.threads; OpenBLAS's pool is global: the layers
         * keep it on the caller's thread for c.threads = 1 and put the
         * caller's setting back afterwards */
        c.threads = nth[k];
        openblas_set_num_threads(nth[k] > 1 ? nth[k] : 2);
        const int blas_was = openblas_get_num_threads();
        attn_trainer *t = run(&c, 15);
        CHECK_MSG(openblas_get_num_threads() == blas_was,
                  "OpenBLAS threads %d after training, %d before",
                  openblas_get_num_threads(), blas_was);
        if (!t) break;
        p[k] = malloc(sizeof(float) * n);
        memcpy(p[k], attn_trainer_params(t), sizeof(float) * n);
        attn_trainer_free(t);
    }
    openblas_set_num_threads(1);
    for (int k = 1; k < 4; k++)
        CHECK_MSG(p[0] && p[k] && memcmp(p[0], p[k], sizeof(float) * n) == 0,
                  "%s: 1 and %d threads give different models",
                  at == ATTN_ATTENTION_DOT ? "dot" : "additive", nth[k]);
    for (int k = 0; k < 4; k++) free(p[k]);
}

/* NaN in the model stops a step with ATTN_E_NONFINITE and a message; the
 * parameters and the step count stay as they were. */
static void nonfinite_stops(void) {
    attn_train_config c = small(ATTN_TASK_REVERSE, ATTN_ATTENTION_DOT);
    attn_trainer *t = run(&c, 2);
    if (!t) return;
    const int64_t n = t->s.n;
    float *before = malloc(sizeof(float) * n);
    /* head bias NaN: the logits, hence the loss */
    t->s.params[n - 1] = NAN;
    memcpy(before, t->s.params, sizeof(float) * n);
    CHECK_STATUS(attn_trainer_step(t, NULL), ATTN_E_NONFINITE);
    CHECK_MSG(strstr(attn_last_error(), "training stopped at step 3") != NULL,
              "message: %s", attn_last_error());
    CHECK(memcmp(before, t->s.params, sizeof(float) * n) == 0);
    CHECK(attn_trainer_steps_done(t) == 2);
    /* an Inf in the embedding reaches the encoder's input */
    t->s.params[n - 1] = 0;
    t->s.params[3] = INFINITY;
    CHECK_STATUS(attn_trainer_step(t, NULL), ATTN_E_NONFINITE);
    CHECK(strstr(attn_last_error(), "training stopped") != NULL);
    t->s.params[3] = 0;
    CHECK_STATUS(attn_trainer_step(t, NULL), ATTN_OK);
    free(before);
    attn_trainer_free(t);
    /* bad configurations */
    attn_train_config b = small(ATTN_TASK_COPY, ATTN_ATTENTION_DOT);
    b.batch = 0;
    CHECK_STATUS(attn_trainer_create(&b, &t), ATTN_E_INVALID);
    b = small(ATTN_TASK_COPY, ATTN_ATTENTION_DOT);
    b.model.enc.num_heads = 5; /* does not divide 32 */
    CHECK_STATUS(attn_trainer_create(&b, &t), ATTN_E_INVALID);
    b = small(ATTN_TASK_COPY, ATTN_ATTENTION_DOT);
    b.optim.lr = 0;
    CHECK_STATUS(attn_trainer_create(&b, &t), ATTN_E_INVALID);
    CHECK_STATUS(attn_trainer_step(NULL, NULL), ATTN_E_INVALID);
}

int main(void) {
    const int sanitized = getenv("ATTN_SANITIZED") != NULL;
    snprintf(dir, sizeof dir, "/tmp/attn_test_train_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    learns_copy(sanitized);
    resume_bitwise(ATTN_TASK_REVERSE, ATTN_ATTENTION_DOT, 0.0);
    resume_bitwise(ATTN_TASK_ADD, ATTN_ATTENTION_ADDITIVE, 0.1);
    checkpoint_files();
    threads_bitwise(ATTN_ATTENTION_DOT);
    threads_bitwise(ATTN_ATTENTION_ADDITIVE);
    nonfinite_stops();
    rmdir(dir);
    return check_done("test_train_run");
}

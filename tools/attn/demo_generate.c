/* The demo gallery's part 11: a small encoder-decoder trained on the spot
 * to normalize dates, what it generates for a few human-written dates, and
 * its cross-attention: which source characters each output character
 * reads (Bahdanau's alignment picture). */
#include "cli.h"
#include "attn_transformer.h"

#include <stdlib.h>
#include <string.h>

/* Human-written dates and what they mean: the model's answers are
 * marked right or wrong against these. */
static const char *const examples[][2] = {
    {"tue 3 march 2026", "2026-03-03"},
    {"03/03/26", "2026-03-03"},
    {"march 3, 2026", "2026-03-03"},
    {"the 21st of june 1999", "1999-06-21"},
    {"20491231", "2049-12-31"}};
#define NEX 5
#define MARK_RIGHT "\xe2\x9c\x93" /* ✓ */
#define MARK_WRONG "\xe2\x9c\x97" /* ✗ */

/* " ✓" when got is the right answer, else " ✗ (right: 2026-03-03)". */
static void mark(char *buf, size_t cap, const char *got, const char *want) {
    if (strcmp(got, want) == 0)
        snprintf(buf, cap, " " MARK_RIGHT);
    else
        snprintf(buf, cap, " " MARK_WRONG " (right: %s)", want);
}

/* The short training run of the date model, as the captions say it. */
typedef struct {
    int64_t steps;
    double secs, exact, score; /* score: the drawn head's alignment */
} date_run;

/* The cross-attention picture of src -> text (want: the right answer)
 * from the weights w (M layers x Hc heads, Lt x n), head best. */
static int draw_alignment(const char *cmd, demo_gallery *g, const char *src,
                          const char *want, const char *text, int64_t n,
                          int64_t no, int64_t Lt, float *w, int64_t M,
                          int64_t Hc, int64_t best, const date_run *run) {
    char xs[64][8], ys[64][8];
    const char *xl[64], *yl[64];
    for (int64_t j = 0; j < n; j++) {
        const char ch = src[j];
        if (ch == ' ')
            snprintf(xs[j], 8, "\xe2\x90\xa3");
        else
            snprintf(xs[j], 8, "%c", ch);
        xl[j] = xs[j];
    }
    for (int64_t i = 0; i < Lt; i++) {
        if (i < no)
            snprintf(ys[i], 8, "%c", text[i]);
        else
            snprintf(ys[i], 8, "EOS");
        yl[i] = ys[i];
    }
    char title[240], ok[64];
    mark(ok, sizeof ok, text, want);
    snprintf(title, sizeof title,
             "\"%s\" -> %s%s: cross-attention, layer %lld "
             "head %lld",
             src, text, ok, (long long)(best / Hc), (long long)(best % Hc));
    printf("    alignment picture: \"%s\" -> %s%s\n", src, text, ok);
    attn_heatmap_opts ho;
    attn_heatmap_opts_init(&ho);
    ho.title = title;
    ho.x_labels = xl;
    ho.y_labels = yl;
    ho.x_title = "source character";
    ho.y_title = "output character";
    ho.annotate = 0;
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, M, Hc, Lt, n);
    const char *file = "11_date_alignment.png";
    attn_status st = attn_heatmap_write(gallery_path(g, file), &W, best / Hc,
                                        best % Hc, &ho);
    if (st) return cli_fail(cmd, st, "drawing");
    {
        char cap[512];
        snprintf(cap, sizeof cap,
                 "A 1 + 1 layer encoder-decoder trained on the "
                 "spot for %lld steps (%.1f s), a snapshot: `attn train date` "
                 "trains the full one to ~100%%; this one gets %.3f of 200 "
                 "fresh dates exactly right. Answers are marked " MARK_RIGHT
                 " right or " MARK_WRONG " wrong, with the right one beside. "
                 "Each output character (row) reads the source characters of "
                 "its own field: over 100 fresh dates this head puts %.2f of "
                 "its weight on the year, month or day characters the output "
                 "character comes from.",
                 (long long)run->steps, run->secs, run->exact, run->score);
        gallery_add(g, file, cap);
        snprintf(cap, sizeof cap,
                 "Trained on the spot (smaller than `attn "
                 "train date`, said so): %lld steps of 32 dates, %.1f s. "
                 "Generated with the key/value cache, greedy and beam 4.",
                 (long long)run->steps, run->secs);
        gallery_note(g, cap);
    }
    return 0;
}

int gallery_dates(const char *cmd, demo_gallery *g) {
    gallery_section(g, "11. A Transformer that generates: date normalization "
                       "and its cross-attention");
    attn_gen_train_config c;
    attn_gen_train_config_init(&c, ATTN_GEN_DATE, ATTN_MODEL_ENCDEC);
    /* smaller and shorter than `attn train date` so the demo stays quick */
    attn_transformer_config *m = &c.model;
    m->enc.num_layers = m->dec.num_layers = 1;
    m->enc.d_model = m->dec.d_model = 32;
    m->enc.num_heads = m->dec.num_heads = 2;
    m->enc.dim_feedforward = m->dec.dim_feedforward = 64;
    c.batch = 32;
    c.steps = c.optim.decay_steps = g->quick ? 60 : 400;
    c.optim.lr = 6e-3;
    c.optim.min_lr = 3e-4;
    c.optim.warmup = c.steps / 5;
    c.threads = 1;
    attn_gen_trainer *tr = NULL;
    attn_status st = attn_gen_trainer_create(&c, &tr);
    if (st) return cli_fail(cmd, st, "date model");
    const double t0 = cli_now_s();
    for (int64_t s = 0; s < c.steps && !st; s++)
        st = attn_gen_trainer_step(tr, NULL);
    const double secs = cli_now_s() - t0;
    const attn_gen_train_config *tc = attn_gen_trainer_config(tr);
    const float *params = attn_gen_trainer_params(tr);
    attn_gen_eval_result r;
    attn_generate_opts go;
    attn_generate_opts_init(&go);
    go.threads = 1;
    if (!st)
        st = attn_gen_evaluate(&tc->model, params, &tc->task, 200, 12345, &go,
                               &r);
    if (st) {
        attn_gen_trainer_free(tr);
        return cli_fail(cmd, st, "date model");
    }
    int rc = gallery_table_row(g, "input\tgenerated (greedy)\tbeam 4");
    /* a snapshot of a short training run, said so: its wrong answers are
     * marked, with the right one beside them */
    printf("(11) date model (1 + 1 layers, d_model 32), a snapshot after %lld "
           "steps in %.1f s (`attn train date` trains the full one to ~100%%): "
           "exact match %.3f on 200 fresh dates; " MARK_RIGHT
           " right, " MARK_WRONG " wrong (the right answer beside it)\n",
           (long long)c.steps, secs, r.exact_match);
    int64_t Lsmax, Ltmax;
    attn_gen_batch_dims(&tc->task, tc->model.kind, &Lsmax, &Ltmax);
    int32_t ids[64], out[64];
    int shown = -1; /* the example drawn: the first the model gets right */
    for (int e = 0; e < NEX && !rc; e++) {
        int64_t n, no, nb;
        char a[64], b[64], ma[64], mb[64], row[400];
        if ((st = attn_gen_input(&tc->task, tc->model.kind, examples[e][0], ids,
                                 64, &n)))
            break;
        go.beam = 1;
        if ((st = attn_generate(&tc->model, params, 1, n, ids, &n, &go, out, 64,
                                &no, NULL)))
            break;
        attn_gen_decode(&tc->task, ATTN_SIDE_TARGET, out, no, a, sizeof a);
        go.beam = 4;
        go.length_penalty = 0.6;
        if ((st = attn_generate(&tc->model, params, 1, n, ids, &n, &go, out, 64,
                                &nb, NULL)))
            break;
        attn_gen_decode(&tc->task, ATTN_SIDE_TARGET, out, nb, b, sizeof b);
        mark(ma, sizeof ma, a, examples[e][1]);
        mark(mb, sizeof mb, b, examples[e][1]);
        if (shown < 0 && strcmp(a, examples[e][1]) == 0) shown = e;
        snprintf(row, sizeof row, "%s\t%s%s\t%s%s", examples[e][0], a, ma, b,
                 mb);
        rc = gallery_table_row(g, row);
        printf("    %-24s -> %s%s (beam 4: %s%s)\n", examples[e][0], a, ma, b,
               mb);
    }
    /* none right (a very short run): draw the first, marked wrong */
    const int drawn = shown < 0 ? 0 : shown;
    if (st) rc = cli_fail(cmd, st, "generation");
    /* the alignment picture of an example the model gets right, best head */
    const int64_t M = tc->model.dec.num_layers;
    const int64_t Hc = attn_decoder_cross_heads(&tc->model.dec);
    double score[64];
    if (!rc) rc = cli_gen_alignment(cmd, tc, params, 100, 1, score);
    float *w = NULL, *lg = NULL, *ws = NULL;
    int64_t n = 0, no = 0, best = 0;
    char text[64] = "";
    if (!rc) {
        for (int64_t k = 1; k < M * Hc; k++)
            if (score[k] > score[best]) best = k;
        go.beam = 1;
        attn_gen_input(&tc->task, tc->model.kind, examples[drawn][0], ids, 64,
                       &n);
        st = attn_generate(&tc->model, params, 1, n, ids, &n, &go, out, 64, &no,
                           NULL);
        attn_gen_decode(&tc->task, ATTN_SIDE_TARGET, out, no, text,
                        sizeof text);
    }
    const int64_t Lt = no < tc->model.max_tgt ? no + 1 : no;
    size_t wsn = 0;
    if (!rc && !st)
        st = attn_transformer_workspace_size(&tc->model, 1, n, Lt, &wsn);
    if (!rc && !st) {
        w = malloc(sizeof(float) * (size_t)(M * Hc * Lt * n));
        lg = malloc(sizeof(float) * (size_t)(Lt * tc->model.vocab_tgt));
        ws = malloc(sizeof(float) * wsn);
        if (!w || !lg || !ws) st = ATTN_E_NOMEM;
    }
    if (!rc && !st) {
        int32_t tin[64];
        tin[0] = ATTN_GEN_BOS;
        memcpy(tin + 1, out, sizeof(int32_t) * (size_t)(Lt - 1));
        attn_layer_opts o = cli_threads_opts(1);
        st = attn_transformer_forward(&tc->model, params, 1, n, ids, &n, Lt,
                                      tin, &o, lg, w, ws);
    }
    if (!rc && st) rc = cli_fail(cmd, st, "cross-attention");
    if (!rc) {
        const date_run run = {c.steps, secs, r.exact_match, score[best]};
        rc = draw_alignment(cmd, g, examples[drawn][0], examples[drawn][1],
                            text, n, no, Lt, w, M, Hc, best, &run);
    }
    free(w);
    free(lg);
    free(ws);
    attn_gen_trainer_free(tr);
    return rc;
}

/* The demo gallery's part 10: a small sequence-reversal model trained on
 * the spot (about a second) and the attention it learned. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

int gallery_reversal(const char *cmd, demo_gallery *g) {
    gallery_section(g,
                    "10. The learned attention of the sequence-reversal model");
    attn_train_config c;
    attn_train_config_init(&c, ATTN_TASK_REVERSE);
    /* smaller than `attn train reverse` so the demo stays quick */
    c.task.min_len = c.task.max_len = 8;
    c.model.enc.d_model = 32;
    c.model.enc.num_heads = 2;
    c.model.enc.dim_feedforward = 64;
    c.batch = 32;
    c.steps = c.optim.decay_steps = 300;
    c.threads = 1;
    attn_trainer *tr = NULL;
    attn_status st = attn_trainer_create(&c, &tr);
    if (st) return cli_fail(cmd, st, "reversal model");
    const double t0 = cli_now_s();
    for (int64_t s = 0; s < c.steps && !st; s++)
        st = attn_trainer_step(tr, NULL);
    const double secs = cli_now_s() - t0;
    const attn_model_config *m = &attn_trainer_config(tr)->model;
    attn_eval_result r;
    if (!st)
        st = attn_model_evaluate(m, attn_trainer_params(tr), &c.task, 1000,
                                 12345, 1, &r);
    /* one input and its weights (layers, heads, 8, 8) */
    enum { L = 8 };
    const int32_t in[L] = {3, 1, 4, 1, 5, 9, 2, 6};
    const int64_t N = m->enc.num_layers, H = attn_encoder_weight_heads(&m->enc);
    size_t wsn = 0;
    float *w = NULL, *ws = NULL, logits[L * 10];
    if (!st) st = attn_model_workspace_size(m, 1, L, &wsn);
    if (!st) {
        w = malloc(sizeof(float) * (size_t)(N * H * L * L));
        ws = malloc(sizeof(float) * wsn);
        if (!w || !ws) st = ATTN_E_NOMEM;
    }
    attn_layer_opts o = cli_threads_opts(1);
    if (!st)
        st = attn_model_forward(m, attn_trainer_params(tr), 1, L, in, NULL, &o,
                                logits, w, ws);
    int rc = 0;
    if (st) {
        rc = cli_fail(cmd, st, "reversal model");
    } else {
        double best = 0;
        int64_t bl = 0, bh = 0;
        for (int64_t l = 0; l < N; l++)
            for (int64_t h = 0; h < H; h++) {
                double s = 0;
                for (int i = 0; i < L; i++)
                    s += w[((l * H + h) * L + i) * L + (L - 1 - i)];
                if (s / L > best) best = s / L, bl = l, bh = h;
            }
        char lab[2 * L][28]; /* "%d→%d" of two ints */
        const char *xl[L], *yl[L];
        printf(
            "(10) reversal model (%lld layers, %lld heads, d_model %lld): %lld "
            "steps in %.1f s, token accuracy %.4f on 1000 fresh sequences;"
            "\n    input 3 1 4 1 5 9 2 6 -> prediction",
            (long long)N, (long long)H, (long long)m->enc.d_model,
            (long long)c.steps, secs, r.token_acc);
        for (int i = 0; i < L; i++) {
            int arg = 0;
            for (int k = 1; k < 10; k++)
                if (logits[i * 10 + k] > logits[i * 10 + arg]) arg = k;
            printf(" %d", arg);
            snprintf(lab[i], sizeof lab[i], "%d", in[i]);
            snprintf(lab[L + i], sizeof lab[L + i], "%d\xe2\x86\x92%d", in[i],
                     arg); /* 3→6 */
            xl[i] = lab[i];
            yl[i] = lab[L + i];
        }
        printf("; layer %lld head %lld puts %.2f of its weight on the "
               "mirrored position\n",
               (long long)bl, (long long)bh, best);
        attn_heatmap_opts ho;
        attn_heatmap_opts_init(&ho);
        ho.title = "reversal: every layer (rows) and head (columns)";
        ho.x_labels = xl;
        ho.y_labels = yl;
        ho.x_title = "key (input token)";
        ho.y_title = "query (input \xe2\x86\x92 prediction)";
        attn_tensor W = attn_tensor_4d(w, ATTN_F32, N, H, L, L);
        const char *file = "10_reversal_attention.png";
        /* the weights too, (layer, batch, head, query, key) as attn encoder
         * --weights writes, for attn stats, heatmap and html */
        const int64_t shape[5] = {N, 1, H, L, L};
        if ((st = cli_layer_grid_write(gallery_path(g, file), &W, &ho))) {
            rc = cli_fail(cmd, st, "drawing");
        } else if ((rc = cli_save_array(
                        cmd, gallery_path(g, "10_reversal_weights.npy"),
                        ATTN_F32, w, 5, shape))) {
        } else {
            char cap[512];
            snprintf(cap, sizeof cap,
                     "A model trained for %lld steps to reverse "
                     "8 digits: in the last layer query i looks at key 7 - i, "
                     "the anti-diagonal (layer %lld head %lld: %.2f of its "
                     "weight on average). `attn train reverse` trains the full "
                     "one. The weights: 10_reversal_weights.npy (layer, batch, "
                     "head, query, key).",
                     (long long)c.steps, (long long)bl, (long long)bh, best);
            gallery_add(g, file, cap);
        }
    }
    free(w);
    free(ws);
    attn_trainer_free(tr);
    return rc;
}

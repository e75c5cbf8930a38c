/* The terminal view of a known 3 x 3 map equals the stored expected text
 * (plain, 256-colour and true colour), plus half blocks, masks, the
 * measuring call and the errors. */
#include "attn.h"
#include "attn_viz.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_file(const char *name, size_t *n) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/%s", ATTN_SOURCE_DIR, name);
    return check_slurp(path, n);
}

static void known_3x3(void) {
    float w[9] = {1.0f / 3,  1.0f / 3,  1.0f / 3,  0.264458f, 0.471083f,
                  0.264458f, 0.532897f, 0.299160f, 0.167943f};
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, 3, 3);
    const char *tok[3] = {"I", "like", "tea"};
    const char *files[3] = {"term_3x3_plain.txt", "term_3x3_256.txt",
                            "term_3x3_truecolor.txt"};
    for (int c = 0; c < 3; c++) {
        attn_term_opts o;
        attn_term_opts_init(&o);
        o.x_labels = tok;
        o.y_labels = tok;
        o.title = "three tokens";
        o.color = (attn_term_color)c;
        char buf[8192];
        size_t len = 0, want_len = 0;
        CHECK_STATUS(attn_term_render(&W, 0, 0, &o, buf, sizeof buf, &len),
                     ATTN_OK);
        char *want = read_file(files[c], &want_len);
        CHECK(want != NULL);
        if (!want) continue;
        CHECK_MSG(len == want_len && memcmp(buf, want, len) == 0,
                  "%s differs:\n%s\n--- expected ---\n%s", files[c], buf, want);
        CHECK(strlen(buf) == len);
        /* measuring, and a buffer one byte short */
        size_t need = 0;
        CHECK_STATUS(attn_term_render(&W, 0, 0, &o, NULL, 0, &need), ATTN_OK);
        CHECK(need == len);
        CHECK_STATUS(attn_term_render(&W, 0, 0, &o, buf, len, &need),
                     ATTN_E_INVALID);
        CHECK(need == len);
        free(want);
    }
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

static void dense_and_masked(void) {
    /* 100 x 90 causal map: half blocks, 50 lines of map */
    int R = 100, C = 90;
    float *w = malloc(sizeof(float) * (size_t)(R * C));
    for (int i = 0; i < R * C; i++) w[i] = (float)(i % 10) / 10.0f;
    w[5 * C + 1] = NAN;
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, R, C);
    attn_mask m;
    attn_mask_init(&m);
    m.causal = 1;
    attn_term_opts o;
    attn_term_opts_init(&o);
    o.mask = &m;
    o.width = 120;
    size_t need = 0;
    CHECK_STATUS(attn_term_render(&W, 0, 0, &o, NULL, 0, &need), ATTN_OK);
    char *buf = malloc(need + 1);
    size_t len;
    CHECK_STATUS(attn_term_render(&W, 0, 0, &o, buf, need + 1, &len), ATTN_OK);
    /* 90 columns fit in 120 - 14: one half block per cell, 2 rows a line */
    CHECK(count(buf, "\xe2\x96\x80") == 50 * 90);
    CHECK(count(buf, "\n") == 50 + 2); /* map lines, ticks, scale */
    CHECK(strstr(buf, "masked") != NULL && strstr(buf, "NaN") != NULL);
    /* masked cells in the masked grey (0x8c8c8c), NaN in magenta */
    CHECK(strstr(buf, "\x1b[48;2;140;140;140m") != NULL);
    CHECK(strstr(buf, "255;0;255m") != NULL);
    free(buf);

    /* plain, 80 columns: the map is block-averaged to fit */
    o.color = ATTN_TERM_PLAIN;
    o.width = 80;
    CHECK_STATUS(attn_term_render(&W, 0, 0, &o, NULL, 0, &need), ATTN_OK);
    buf = malloc(need + 1);
    CHECK_STATUS(attn_term_render(&W, 0, 0, &o, buf, need + 1, &len), ATTN_OK);
    int longest = 0, cur = 0;
    for (size_t i = 0; i < len; i++) {
        if (buf[i] == '\n')
            cur = 0;
        else if (++cur > longest)
            longest = cur;
    }
    CHECK_MSG(longest <= 80, "plain line of %d columns", longest);
    CHECK(strchr(buf, 'x') != NULL && strchr(buf, '?') != NULL);
    CHECK(strchr(buf, '\x1b') == NULL);
    free(buf);
    free(w);
}

static void errors(void) {
    float w[4] = {0.5f, 0.5f, 1, 0};
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, 2, 2);
    attn_term_opts o;
    attn_term_opts_init(&o);
    size_t len;
    char buf[16];
    CHECK_STATUS(attn_term_render(&W, 0, 0, &o, NULL, 0, NULL), ATTN_E_INVALID);
    CHECK_STATUS(attn_term_render(&W, 0, 0, &o, NULL, 5, &len), ATTN_E_INVALID);
    CHECK_STATUS(attn_term_render(&W, 0, 2, &o, buf, sizeof buf, &len),
                 ATTN_E_SHAPE);
    o.width = 5;
    CHECK_STATUS(attn_term_render(&W, 0, 0, &o, buf, sizeof buf, &len),
                 ATTN_E_INVALID);
    attn_term_opts_init(&o);
    o.color = (attn_term_color)9;
    CHECK_STATUS(attn_term_render(&W, 0, 0, &o, buf, sizeof buf, &len),
                 ATTN_E_INVALID);
}

int main(void) {
    known_3x3();
    dense_and_masked();
    errors();
    return check_done("test_viz_term");
}

/* The HTML viewer in headless Chromium (Debian's chromium package): the
 * page loads without console messages, builds the selectors, the token
 * lines of a focused query (as the hover does) and the heatmap, and a
 * screenshot is not blank. */
#include "attn.h"
#include "attn_viz.h"
#include "check.h"

#include <cairo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* Runs chromium headless on url with extra flags; stdout to out, stderr to
 * log. Returns the exit status. */
static int chromium(const char *flags, const char *url, const char *out,
                    const char *log) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "timeout 120 chromium --headless --no-sandbox --disable-gpu "
             "--user-data-dir='%s/profile' --no-first-run "
             "--enable-logging=stderr --v=0 %s '%s' >'%s' 2>'%s'",
             dir, flags, url, out, log);
    return system(cmd);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/attn_html_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    enum { N = 2, H = 3, Lq = 5, Lk = 6 };
    static float w[N * H * Lq * Lk];
    unsigned long long s = 11;
    for (int r = 0; r < N * H * Lq; r++) {
        double sum = 0;
        for (int j = 0; j < Lk; j++)
            sum += w[r * Lk + j] = (float)(test_rand(&s) + 1.2);
        for (int j = 0; j < Lk; j++)
            w[r * Lk + j] = (float)(w[r * Lk + j] / sum);
    }
    /* one tiny weight: no line is drawn for it */
    int tiny = ((1 * H + 2) * Lq + 3) * Lk + 4;
    w[tiny - 1] += w[tiny] - 0.0001f;
    w[tiny] = 0.0001f;
    const char *q[Lq] = {"The", "cat", "</script>", "on", "\"mat\""};
    const char *k[Lk] = {"Le", "chat", "\xc3\xa9tait", "sur", "le", "tapis"};
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, N, H, Lq, Lk);
    attn_html_opts o = {"viewer <test>", q, k, NULL};
    char page[256], url[512], dom[256], log[256], shot[256];
    snprintf(page, sizeof page, "%s/view.html", dir);
    snprintf(dom, sizeof dom, "%s/dom.txt", dir);
    snprintf(log, sizeof log, "%s/log.txt", dir);
    snprintf(shot, sizeof shot, "%s/shot.png", dir);
    CHECK_STATUS(attn_html_write(page, &W, &o), ATTN_OK);

    size_t n;
    char *html = check_slurp(page, &n);
    CHECK(html != NULL);
    if (html) {
        /* self-contained: nothing fetched from elsewhere */
        CHECK(strstr(html, "src=") == NULL && strstr(html, "href=") == NULL);
        CHECK(strstr(html, "http://") == NULL ||
              count(html, "http://") ==
                  count(html, "http://www.w3.org/2000/svg"));
        CHECK(count(html, "</script>") == 1); /* the token is escaped */
        free(html);
    }

    /* layer 1, head 2, query 3 focused, as when hovering it */
    snprintf(url, sizeof url, "file://%s#layer=1&head=2&focus=q3", page);
    int rc = chromium("--virtual-time-budget=3000 --dump-dom", url, dom, log);
    CHECK_MSG(rc == 0, "chromium --dump-dom exited with %d", rc);
    char *d = check_slurp(dom, &n), *l = check_slurp(log, &n);
    CHECK(d != NULL && l != NULL);
    if (d && l) {
        CHECK_MSG(strstr(l, "CONSOLE") == NULL, "console messages:\n%s", l);
        CHECK(count(d, "<option") == N + H);
        CHECK(count(d, "<line") == Lk - 1); /* one per key but the tiny one */
        CHECK(strstr(d, "&lt;/script&gt;") != NULL);
        CHECK(strstr(d, "\xc3\xa9tait") != NULL);
        CHECK(count(d, "class=\"tok on\"") == 1);
        CHECK(strstr(d, "viewer &lt;test&gt;") != NULL);
        CHECK(strstr(d, "<canvas id=\"heat\" width=\"") != NULL);
        /* the heatmap is as informative as the PNG one: token labels on
         * both axes (the focused query marked), values in the cells, and a
         * colour bar with ticks */
        CHECK_MSG(count(d, "class=\"lab\"") + count(d, "class=\"lab on\"") ==
                      Lq + Lk,
                  "heatmap labels: %d", count(d, "class=\"lab"));
        CHECK(count(d, "class=\"lab on\"") == 1 &&
              strstr(d, "px;\">on</div>") != NULL);
        CHECK(strstr(d, ">tapis</div>") != NULL &&
              strstr(d, ">cat</div>") != NULL);
        CHECK_MSG(strstr(d, "data-values=\"30\"") != NULL,
                  "values drawn in the cells");
        CHECK(strstr(d, "id=\"cgrad\"") != NULL &&
              strstr(d, "linear-gradient") != NULL);
        CHECK(count(d, "class=\"tick\"") == 5);
        CHECK(strstr(d, ">0.000</div>") != NULL);
    }
    free(d);
    free(l);
    /* no focus: every line above the threshold */
    snprintf(url, sizeof url, "file://%s", page);
    rc = chromium("--virtual-time-budget=3000 --dump-dom", url, dom, log);
    d = check_slurp(dom, &n);
    l = check_slurp(log, &n);
    CHECK(rc == 0 && d && l);
    if (d && l) {
        CHECK(strstr(l, "CONSOLE") == NULL);
        CHECK(count(d, "<line") == Lq * Lk);
    }
    free(d);
    free(l);

    /* screenshot: not blank (many non-white pixels, many colours) */
    char flags[512];
    snprintf(flags, sizeof flags, "--window-size=900,500 --screenshot='%s'",
             shot);
    rc = chromium(flags, url, dom, log);
    CHECK_MSG(rc == 0, "chromium --screenshot exited with %d", rc);
    cairo_surface_t *img = cairo_image_surface_create_from_png(shot);
    CHECK(cairo_surface_status(img) == CAIRO_STATUS_SUCCESS);
    if (cairo_surface_status(img) == CAIRO_STATUS_SUCCESS) {
        int iw = cairo_image_surface_get_width(img);
        int ih = cairo_image_surface_get_height(img);
        int st = cairo_image_surface_get_stride(img);
        const unsigned char *px = cairo_image_surface_get_data(img);
        long dark = 0, viridis_like = 0;
        for (int y = 0; y < ih; y++)
            for (int x = 0; x < iw; x++) {
                uint32_t v =
                    *(const uint32_t *)(const void *)(px + y * st + 4 * x);
                int r = (v >> 16) & 255, g = (v >> 8) & 255, b = v & 255;
                if (r + g + b < 600) dark++;
                if (g > r + 40 && g > b - 20 && r < 150) viridis_like++;
            }
        CHECK(iw == 900 && ih == 500);
        CHECK_MSG(dark > 5000, "only %ld non-white pixels", dark);
        CHECK_MSG(viridis_like > 1000, "only %ld heatmap-coloured pixels",
                  viridis_like);
    }
    cairo_surface_destroy(img);

    /* errors */
    CHECK_STATUS(attn_html_write("/nonexistent-dir/v.html", &W, &o), ATTN_E_IO);
    CHECK_STATUS(attn_html_write(page, NULL, &o), ATTN_E_INVALID);
    static float big[1 * 1 * 2 * 1100];
    attn_tensor B = attn_tensor_4d(big, ATTN_F32, 1, 1, 2, 1100);
    CHECK_STATUS(attn_html_write(page, &B, NULL), ATTN_E_SHAPE);
    attn_tensor Wn = attn_tensor_4d(w, ATTN_F32, 1, 1, Lq, Lk);
    CHECK_STATUS(attn_html_write(page, &Wn, NULL), ATTN_OK); /* positions */
    /* the default title says what is shown */
    html = check_slurp(page, &n);
    CHECK(
        html &&
        strstr(
            html,
            "<title>attention weights: 5 x 6 tokens, 1 layer x 1 head</title>"));
    free(html);

    int fails = check_done("test_viz_html");
    if (!fails) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    } else {
        fprintf(stderr, "files kept in %s\n", dir);
    }
    return fails;
}

/* Heatmaps read back: PNG size and the colour of chosen cells against the
 * colour map, NaN and masked cells, block averaging of long maps, SVG
 * labels as text, PDF output, composite figures, the geometry plot, block
 * averages of streamed tiles, and the errors. */
#include "attn.h"
#include "attn_viz.h"
#include "check.h"

#include <cairo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static const char *tmp(const char *name) {
    static char path[4][256];
    static int k = 0;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k];
}

/* Pixel (x, y) of a PNG as 8-bit RGB; returns 0 if unreadable. */
typedef struct {
    cairo_surface_t *s;
    int w, h, stride;
    const unsigned char *data;
} png;

static int png_load(const char *path, png *p) {
    p->s = cairo_image_surface_create_from_png(path);
    if (cairo_surface_status(p->s) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(p->s);
        p->s = NULL;
        return 0;
    }
    cairo_surface_flush(p->s);
    p->w = cairo_image_surface_get_width(p->s);
    p->h = cairo_image_surface_get_height(p->s);
    p->stride = cairo_image_surface_get_stride(p->s);
    p->data = cairo_image_surface_get_data(p->s);
    return 1;
}

static void png_rgb(const png *p, int x, int y, int rgb[3]) {
    uint32_t v =
        *(const uint32_t *)(const void *)(p->data + y * p->stride + 4 * x);
    rgb[0] = (v >> 16) & 255;
    rgb[1] = (v >> 8) & 255;
    rgb[2] = v & 255;
}

static void png_free(png *p) {
    if (p->s) cairo_surface_destroy(p->s);
    p->s = NULL;
}

/* The pixel near the top-left corner of cell (i, j), away from any text. */
static void cell_rgb(const png *p, const attn_heatmap_box *b, int64_t i,
                     int64_t j, int rgb[3]) {
    double off = b->cell >= 6 ? 2 : b->cell / 2;
    png_rgb(p, (int)(b->map_x + j * b->cell + off),
            (int)(b->map_y + i * b->cell + off), rgb);
}

static int close_rgb(const int a[3], const uint8_t b[3], int tol) {
    for (int k = 0; k < 3; k++)
        if (abs(a[k] - b[k]) > tol) return 0;
    return 1;
}

static void expect_cell(const png *p, const attn_heatmap_box *b, int64_t i,
                        int64_t j, double v, attn_colormap cmap) {
    int got[3];
    uint8_t want[3];
    cell_rgb(p, b, i, j, got);
    attn_colormap_rgb(cmap, (v - b->vmin) / (b->vmax - b->vmin), want);
    CHECK_MSG(close_rgb(got, want, 1),
              "cell (%lld, %lld) value %g: got "
              "(%d,%d,%d) want (%d,%d,%d)",
              (long long)i, (long long)j, v, got[0], got[1], got[2], want[0],
              want[1], want[2]);
}

static void colormap_anchors(void) {
    /* published viridis end points and middle; the diverging map is white
     * in the middle */
    uint8_t c[3];
    CHECK_STATUS(attn_colormap_rgb(ATTN_CMAP_VIRIDIS, 0, c), ATTN_OK);
    CHECK(c[0] == 68 && c[1] == 1 && c[2] == 84);
    attn_colormap_rgb(ATTN_CMAP_VIRIDIS, 1, c);
    CHECK(c[0] == 253 && c[1] == 231 && c[2] == 37);
    attn_colormap_rgb(ATTN_CMAP_VIRIDIS, 0.5, c);
    CHECK(c[0] == 33 && c[1] == 144 && c[2] == 140);
    /* viridis at 0, 0.1, ..., 1 as published (R's viridisLite::viridis(11)) */
    const char *hex[11] = {"440154", "482576", "414487", "35608D",
                           "2A788E", "21908C", "22A884", "43BF71",
                           "7AD151", "BBDF27", "FDE725"};
    for (int i = 0; i <= 10; i++) {
        unsigned r, g, b;
        sscanf(hex[i], "%2x%2x%2x", &r, &g, &b);
        attn_colormap_rgb(ATTN_CMAP_VIRIDIS, i / 10.0, c);
        CHECK_MSG(c[0] == r && c[1] == g && c[2] == b,
                  "viridis(%d/10) = "
                  "(%d,%d,%d), published #%s",
                  i, c[0], c[1], c[2], hex[i]);
    }
    attn_colormap_rgb(ATTN_CMAP_VIRIDIS, 2, c); /* clamped */
    CHECK(c[0] == 253 && c[1] == 231 && c[2] == 37);
    attn_colormap_rgb(ATTN_CMAP_DIVERGING, 0.5, c);
    CHECK(c[0] == 247 && c[1] == 247 && c[2] == 247);
    attn_colormap_rgb(ATTN_CMAP_DIVERGING, 0, c);
    CHECK(c[2] > c[0]); /* blue end */
    attn_colormap_rgb(ATTN_CMAP_DIVERGING, 1, c);
    CHECK(c[0] > c[2]); /* red end */
    attn_colormap_rgb(ATTN_CMAP_VIRIDIS, NAN, c);
    CHECK(c[0] == 255 && c[1] == 0 && c[2] == 255);
    CHECK_STATUS(attn_colormap_rgb((attn_colormap)7, 0.5, c), ATTN_E_INVALID);
    CHECK_STATUS(attn_colormap_rgb(ATTN_CMAP_VIRIDIS, 0.5, NULL),
                 ATTN_E_INVALID);
}

static void small_png(void) {
    float w[9] = {1.0f / 3,  1.0f / 3,  1.0f / 3,  0.264458f, 0.471083f,
                  0.264458f, 0.532897f, 0.299160f, 0.167943f};
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, 3, 3);
    const char *tok[3] = {"I", "like", "tea"};
    attn_heatmap_opts o;
    attn_heatmap_opts_init(&o);
    o.title = "three tokens";
    o.x_labels = tok;
    o.y_labels = tok;
    attn_heatmap_box box;
    CHECK_STATUS(attn_heatmap_measure(&W, 0, 0, &o, &box), ATTN_OK);
    CHECK(box.rows == 3 && box.cols == 3 && box.cell >= 24);
    CHECK_NEAR(box.vmin, 0, 0);
    CHECK_NEAR(box.vmax, w[6], 1e-7);
    CHECK_STATUS(attn_heatmap_write(tmp("h3.png"), &W, 0, 0, &o), ATTN_OK);
    png p;
    CHECK(png_load(tmp("h3.png"), &p));
    if (!p.s) return;
    CHECK(p.w == box.width && p.h == box.height);
    /* the map and its colour bar fit inside */
    CHECK(box.map_x + 3 * box.cell < p.w && box.map_y + 3 * box.cell < p.h);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            expect_cell(&p, &box, i, j, w[i * 3 + j], ATTN_CMAP_VIRIDIS);
    png_free(&p);

    /* a fixed scale and the diverging map */
    o.vmin = -1;
    o.vmax = 1;
    o.cmap = ATTN_CMAP_DIVERGING;
    o.annotate = 0;
    CHECK_STATUS(attn_heatmap_measure(&W, 0, 0, &o, &box), ATTN_OK);
    CHECK(box.vmin == -1 && box.vmax == 1);
    CHECK_STATUS(attn_heatmap_write(tmp("h3d.png"), &W, 0, 0, &o), ATTN_OK);
    CHECK(png_load(tmp("h3d.png"), &p));
    if (!p.s) return;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            expect_cell(&p, &box, i, j, w[i * 3 + j], ATTN_CMAP_DIVERGING);
    png_free(&p);
}

static void nan_and_masked(void) {
    /* 5 x 4 (Lq != Lk), f64, NaN at (3, 0), causal mask hides j > i */
    double w[20];
    for (int i = 0; i < 20; i++) w[i] = (i % 7) / 7.0;
    w[3 * 4 + 0] = NAN;
    attn_tensor W = attn_tensor_4d(w, ATTN_F64, 1, 1, 5, 4);
    attn_mask m;
    attn_mask_init(&m);
    m.causal = 1;
    attn_heatmap_opts o;
    attn_heatmap_opts_init(&o);
    o.mask = &m;
    attn_heatmap_box box;
    CHECK_STATUS(attn_heatmap_measure(&W, 0, 0, &o, &box), ATTN_OK);
    CHECK_STATUS(attn_heatmap_write(tmp("nan.png"), &W, 0, 0, &o), ATTN_OK);
    png p;
    CHECK(png_load(tmp("nan.png"), &p));
    if (!p.s) return;
    int rgb[3];
    const uint8_t nan_c[3] = {255, 0, 255}, grey[3] = {0x8c, 0x8c, 0x8c};
    cell_rgb(&p, &box, 3, 0, rgb);
    CHECK_MSG(close_rgb(rgb, nan_c, 0), "NaN cell drawn (%d,%d,%d)", rgb[0],
              rgb[1], rgb[2]);
    cell_rgb(&p, &box, 0, 1, rgb);
    CHECK_MSG(close_rgb(rgb, grey, 0), "masked cell drawn (%d,%d,%d)", rgb[0],
              rgb[1], rgb[2]);
    cell_rgb(&p, &box, 1, 3, rgb);
    CHECK(close_rgb(rgb, grey, 0));
    /* the scale ignores masked cells: its top is the largest visible value */
    double top = 0;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j <= i && j < 4; j++)
            if (isfinite(w[i * 4 + j]) && w[i * 4 + j] > top)
                top = w[i * 4 + j];
    CHECK_NEAR(box.vmax, top, 1e-12);
    expect_cell(&p, &box, 4, 2, w[4 * 4 + 2], ATTN_CMAP_VIRIDIS);
    png_free(&p);
}

static void large_maps(void) {
    /* 300 x 300: one pixel per cell, drawn as a scaled image */
    int L = 300;
    float *w = malloc(sizeof(float) * (size_t)(L * L));
    for (int i = 0; i < L; i++)
        for (int j = 0; j < L; j++)
            w[i * L + j] = (float)((i * 31 + j * 17) % 97) / 96.0f;
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, L, L);
    attn_heatmap_opts o;
    attn_heatmap_opts_init(&o);
    attn_heatmap_box box;
    CHECK_STATUS(attn_heatmap_measure(&W, 0, 0, &o, &box), ATTN_OK);
    CHECK(box.rows == L && box.cols == L && box.cell >= 1);
    CHECK_STATUS(attn_heatmap_write(tmp("h300.png"), &W, 0, 0, &o), ATTN_OK);
    png p;
    CHECK(png_load(tmp("h300.png"), &p));
    if (p.s) {
        CHECK(p.w == box.width && p.h == box.height);
        const int at[4][2] = {{0, 0}, {17, 129}, {299, 1}, {150, 299}};
        for (int k = 0; k < 4; k++)
            expect_cell(&p, &box, at[k][0], at[k][1],
                        w[at[k][0] * L + at[k][1]], ATTN_CMAP_VIRIDIS);
        png_free(&p);
    }
    free(w);

    /* 1030 x 517 with at most 512 cells a side: blocks of 3 x 2 */
    int R = 1030, C = 517;
    w = malloc(sizeof(float) * (size_t)(R * C));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            w[i * C + j] = (float)((i * 7 + j * 3) % 13) / 12.0f;
    W = attn_tensor_4d(w, ATTN_F32, 1, 1, R, C);
    CHECK_STATUS(attn_heatmap_measure(&W, 0, 0, &o, &box), ATTN_OK);
    CHECK(box.rows == (R + 2) / 3 && box.cols == (C + 1) / 2);
    CHECK_STATUS(attn_heatmap_write(tmp("hbig.png"), &W, 0, 0, &o), ATTN_OK);
    CHECK(png_load(tmp("hbig.png"), &p));
    if (p.s) {
        const int at[3][2] = {
            {0, 0}, {100, 200}, {343, 258}}; /* last block: 1 row, 1 col */
        for (int k = 0; k < 3; k++) {
            int r = at[k][0], c = at[k][1];
            double s = 0;
            int n = 0;
            for (int i = 3 * r; i < R && i < 3 * r + 3; i++)
                for (int j = 2 * c; j < C && j < 2 * c + 2; j++, n++)
                    s += w[i * C + j];
            expect_cell(&p, &box, r, c, s / n, ATTN_CMAP_VIRIDIS);
        }
        png_free(&p);
    }
    free(w);
}

static int file_contains(const char *path, const char *needle) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    int found = strstr(s, needle) != NULL;
    free(s);
    return found;
}

static void vector_formats(void) {
    float w[12];
    for (int i = 0; i < 12; i++) w[i] = (float)(i + 1) / 12.0f;
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, 3, 4);
    const char *q[3] = {"queen", "<b>&", "caf\xc3\xa9"};
    const char *k[4] = {"the", "cat", "sat", "extraordinarily"};
    attn_heatmap_opts o;
    attn_heatmap_opts_init(&o);
    o.title = "vector";
    o.x_labels = k;
    o.y_labels = q;
    CHECK_STATUS(attn_heatmap_write(tmp("v.svg"), &W, 0, 0, &o), ATTN_OK);
    const char *want[] = {">queen</text>",
                          ">&lt;b&gt;&amp;</text>",
                          ">caf\xc3\xa9</text>",
                          ">extraordinarily</text>",
                          ">vector</text>",
                          ">cat</text>",
                          "<svg"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(file_contains(tmp("v.svg"), want[i]), "SVG lacks %s",
                  want[i]);
    /* the long column label is rotated */
    CHECK(file_contains(tmp("v.svg"), "rotate(-90"));
    CHECK_STATUS(attn_heatmap_write(tmp("v.PDF"), &W, 0, 0, &o), ATTN_OK);
    CHECK(file_contains(tmp("v.PDF"), "%PDF"));
}

static void composites(void) {
    enum { N = 2, H = 3, L = 7 };
    float w[N * H * L * L];
    unsigned long long s = 7;
    for (int i = 0; i < N * H * L * L; i++)
        w[i] = (float)(test_rand(&s) * 0.5 + 0.5);
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, N, H, L, L);
    attn_heatmap_opts o;
    attn_heatmap_opts_init(&o);
    o.title = "grid";
    CHECK_STATUS(attn_heatmap_grid_write(tmp("grid.png"), &W, &o), ATTN_OK);
    png p;
    CHECK(png_load(tmp("grid.png"), &p));
    if (p.s) {
        CHECK(p.w > 3 * L * 10 && p.h > 2 * L * 10);
        png_free(&p);
    }
    attn_panel pan[2] = {{&W, 0, 0, "scaled", NULL},
                         {&W, 1, 2, "unscaled", NULL}};
    CHECK_STATUS(attn_figure_write(tmp("pair.svg"), pan, 2, 2, &o), ATTN_OK);
    CHECK(file_contains(tmp("pair.svg"), ">unscaled</text>"));
    CHECK_STATUS(attn_diff_write(tmp("diff.png"), &W, &W, NULL), ATTN_OK);
    double a[2] = {2, 1}, b[2] = {1, 3};
    CHECK_STATUS(attn_geometry_write(tmp("geo.svg"), a, b, "v1", "v2"),
                 ATTN_OK);
    /* 2*1 + 1*3 = 5, cos = 5 / (sqrt(5) sqrt(10)) = 0.707 */
    CHECK(file_contains(tmp("geo.svg"),
                        "v1 \xc2\xb7 v2 = 5,  cos \xce\xb8 = 0.707"));
    double z[2] = {0, 0};
    CHECK_STATUS(attn_geometry_write(tmp("geo0.png"), a, z, NULL, NULL),
                 ATTN_OK);
    double bad[2] = {NAN, 1};
    CHECK_STATUS(attn_geometry_write(tmp("geo1.png"), bad, b, NULL, NULL),
                 ATTN_E_INVALID);
    /* labels need equal shapes */
    float w2[4 * 5];
    for (int i = 0; i < 20; i++) w2[i] = 0.2f;
    attn_tensor W2 = attn_tensor_4d(w2, ATTN_F32, 1, 1, 4, 5);
    attn_panel mixed[2] = {{&W, 0, 0, NULL, NULL}, {&W2, 0, 0, NULL, NULL}};
    CHECK_STATUS(attn_figure_write(tmp("mixed.png"), mixed, 2, 2, &o), ATTN_OK);
    const char *lab[7] = {"a", "b", "c", "d", "e", "f", "g"};
    o.x_labels = lab;
    CHECK_STATUS(attn_figure_write(tmp("mixed.png"), mixed, 2, 2, &o),
                 ATTN_E_SHAPE);
}

/* Panel titles of a figure without an overall title: each one must be
 * drawn in black (the first was once white on white, the others the grey
 * of the previous border). Looks for near-black pixels in the band above
 * the first row of maps, in the first and the second panel's third. */
static int dark_in(const png *p, int x0, int x1, int y0, int y1) {
    int n = 0, rgb[3];
    for (int y = y0; y < y1 && y < p->h; y++)
        for (int x = x0; x < x1 && x < p->w; x++) {
            png_rgb(p, x, y, rgb);
            n += rgb[0] < 40 && rgb[1] < 40 && rgb[2] < 40;
        }
    return n;
}

static void panel_titles(void) {
    enum { N = 2, H = 3, L = 5 };
    float w[N * H * L * L];
    for (int i = 0; i < N * H * L * L; i++) w[i] = 0.2f;
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, N, H, L, L);
    CHECK_STATUS(attn_heatmap_grid_write(tmp("titles.png"), &W, NULL), ATTN_OK);
    png p;
    CHECK(png_load(tmp("titles.png"), &p));
    if (p.s) {
        /* no overall title: the panel titles sit in y 10 .. 32 */
        int third = (p.w - 60) / 3;
        CHECK_MSG(dark_in(&p, 0, third, 10, 32) > 5,
                  "first panel title is invisible");
        CHECK_MSG(dark_in(&p, third, 2 * third, 10, 32) > 5,
                  "second panel title is not black");
        png_free(&p);
    }
}

/* Texts around a small labelled map share one size (axis titles and the
 * colour bar were 10 px beside 12 px token labels), and a difference that
 * rounds to zero reads 0.00, not -0.00. */
static void text_sizes(void) {
    float w[9] = {0.2f, 0.3f, 0.5f, 0.1f, 0.8f, 0.1f, 0.6f, 0.2f, 0.2f};
    float v[9];
    for (int i = 0; i < 9; i++) v[i] = w[i] + (i == 4 ? 1e-4f : 0.0f);
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, 3, 3);
    attn_tensor V = attn_tensor_4d(v, ATTN_F32, 1, 1, 3, 3);
    const char *tok[3] = {"I", "like", "tea"};
    attn_heatmap_opts o;
    attn_heatmap_opts_init(&o);
    o.x_labels = o.y_labels = tok;
    CHECK_STATUS(attn_heatmap_write(tmp("sizes.svg"), &W, 0, 0, &o), ATTN_OK);
    CHECK(file_contains(tmp("sizes.svg"), "font-size=\"12.0\">like</text>"));
    CHECK_MSG(
        file_contains(tmp("sizes.svg"), "font-size=\"12.0\">key</text>") &&
            file_contains(tmp("sizes.svg"),
                          "font-size=\"12.0\" transform=\"rotate(-90.0"),
        "axis titles as large as the token labels");
    CHECK_MSG(file_contains(tmp("sizes.svg"), "font-size=\"12.0\">0.4</text>"),
              "colour bar labels as large as the token labels");
    o.annotate = 1;
    CHECK_STATUS(attn_diff_write(tmp("zero.svg"), &W, &V, &o), ATTN_OK);
    CHECK(file_contains(tmp("zero.svg"), ">0.00</text>"));
    CHECK_MSG(!file_contains(tmp("zero.svg"), ">-0.00</text>"),
              "a cell shows -0.00");
}

static void errors(void) {
    float w[4] = {0.5f, 0.5f, 1, 0};
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, 2, 2);
    attn_heatmap_opts o;
    attn_heatmap_opts_init(&o);
    CHECK_STATUS(attn_heatmap_write(tmp("x.jpg"), &W, 0, 0, &o),
                 ATTN_E_INVALID);
    CHECK_STATUS(attn_heatmap_write(NULL, &W, 0, 0, &o), ATTN_E_INVALID);
    CHECK_STATUS(attn_heatmap_write(tmp("x.png"), NULL, 0, 0, &o),
                 ATTN_E_INVALID);
    CHECK_STATUS(attn_heatmap_write(tmp("x.png"), &W, 1, 0, &o), ATTN_E_SHAPE);
    CHECK_STATUS(attn_heatmap_write(tmp("x.png"), &W, 0, -1, &o), ATTN_E_SHAPE);
    CHECK_STATUS(attn_heatmap_write("/nonexistent-dir/x.png", &W, 0, 0, &o),
                 ATTN_E_IO);
    CHECK_STATUS(attn_heatmap_write("/nonexistent-dir/x.svg", &W, 0, 0, &o),
                 ATTN_E_IO);
    CHECK_STATUS(attn_heatmap_write("/nonexistent-dir/x.pdf", &W, 0, 0, &o),
                 ATTN_E_IO);
    int32_t wi[4] = {0};
    attn_tensor WI = attn_tensor_4d(wi, ATTN_I32, 1, 1, 2, 2);
    CHECK_STATUS(attn_heatmap_write(tmp("x.png"), &WI, 0, 0, &o), ATTN_E_DTYPE);
    o.max_cells = 3;
    CHECK_STATUS(attn_heatmap_write(tmp("x.png"), &W, 0, 0, &o),
                 ATTN_E_INVALID);
    attn_heatmap_opts_init(&o);
    o.x_extent = 1; /* fewer positions than columns */
    CHECK_STATUS(attn_heatmap_write(tmp("x.png"), &W, 0, 0, &o),
                 ATTN_E_INVALID);
    attn_heatmap_opts_init(&o);
    attn_mask m;
    attn_mask_init(&m);
    m.window_left = 0;
    int64_t kl[2] = {5, 5}; /* longer than Lk */
    m.key_lengths = kl;
    o.mask = &m;
    CHECK(attn_heatmap_write(tmp("x.png"), &W, 0, 0, &o) != ATTN_OK);
    CHECK(attn_last_error()[0] != '\0');
    CHECK_STATUS(attn_figure_write(tmp("x.png"), NULL, 1, 1, NULL),
                 ATTN_E_INVALID);
    attn_panel p = {&W, 0, 0, NULL, NULL};
    CHECK_STATUS(attn_figure_write(tmp("x.png"), &p, 1, 0, NULL),
                 ATTN_E_INVALID);
    CHECK_STATUS(attn_heatmap_measure(&W, 0, 0, NULL, NULL), ATTN_E_INVALID);
}

/* Block averages fed tile by tile equal the direct block means. */
static void blockavg(void) {
    const int64_t Lq = 37, Lk = 53;
    float *w = malloc(sizeof(float) * Lq * Lk);
    for (int64_t i = 0; i < Lq * Lk; i++) w[i] = (float)((i * 13) % 29) / 28.0f;
    attn_blockavg *acc = NULL;
    CHECK_STATUS(attn_blockavg_create(Lq, Lk, 1, 2, 8, &acc), ATTN_OK);
    if (!acc) {
        free(w);
        return;
    }
    int64_t rows, cols, br, bc;
    CHECK_STATUS(attn_blockavg_size(acc, &rows, &cols, &br, &bc), ATTN_OK);
    CHECK(br == 5 && bc == 7 && rows == 8 && cols == 8);
    /* tiles of 6 x 11 (not aligned with the blocks); the tile (rows 0..5,
     * cols 44..52) is skipped as a kernel skips an empty tile */
    for (int64_t q0 = 0; q0 < Lq; q0 += 6)
        for (int64_t k0 = 0; k0 < Lk; k0 += 11) {
            if (q0 == 0 && k0 == 44) continue;
            int64_t nq = Lq - q0 < 6 ? Lq - q0 : 6,
                    nk = Lk - k0 < 11 ? Lk - k0 : 11;
            float tile[6 * 12];
            for (int64_t r = 0; r < nq; r++)
                for (int64_t c = 0; c < nk; c++)
                    tile[r * 12 + c] = w[(q0 + r) * Lk + k0 + c];
            CHECK(attn_blockavg_tile(acc, 1, 2, q0, nq, k0, nk, tile, 12) == 0);
            /* another map's tiles are ignored */
            attn_blockavg_tile(acc, 0, 2, q0, nq, k0, nk, tile, 12);
        }
    float map[64];
    uint8_t seen[64];
    CHECK_STATUS(attn_blockavg_result(acc, map, seen), ATTN_OK);
    double worst = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            double s = 0;
            int64_t n = 0;
            for (int64_t i = r * br; i < Lq && i < (r + 1) * br; i++)
                for (int64_t j = c * bc; j < Lk && j < (c + 1) * bc; j++) {
                    if (i < 6 && j >= 44) continue; /* never delivered */
                    s += w[i * Lk + j];
                    n++;
                }
            if (n == 0) {
                CHECK(seen[r * cols + c] == 0 && map[r * cols + c] == 0);
                continue;
            }
            CHECK(seen[r * cols + c] == 1);
            worst = fmax(worst, fabs(map[r * cols + c] - s / n));
        }
    CHECK_MSG(worst < 1e-6, "block averages off by %g", worst);
    CHECK(seen[0 * cols + 7] == 0); /* block (0, 7) = rows 0..4, cols 49..52 */
    /* the averaged map drawn with its positions and the unseen blocks masked */
    attn_tensor M = attn_tensor_4d(map, ATTN_F32, 1, 1, rows, cols);
    attn_tensor S = attn_tensor_4d(seen, ATTN_U8, 1, 1, rows, cols);
    attn_mask m;
    attn_mask_init(&m);
    m.keep = &S;
    attn_heatmap_opts o;
    attn_heatmap_opts_init(&o);
    o.mask = &m;
    o.x_extent = Lk;
    o.y_extent = Lq;
    CHECK_STATUS(attn_heatmap_write(tmp("blocks.png"), &M, 0, 0, &o), ATTN_OK);
    /* blocks a causal mask (bottom-right, Lq < Lk) removes entirely */
    attn_mask c;
    attn_mask_init(&c);
    c.causal = 1;
    c.align = ATTN_ALIGN_BOTTOM_RIGHT;
    uint8_t vis[64];
    CHECK_STATUS(attn_blockavg_visible(acc, &c, 2, 3, vis), ATTN_OK);
    int64_t mism = 0, hidden = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t cc = 0; cc < cols; cc++) {
            int any = 0;
            for (int64_t i = r * br; i < Lq && i < (r + 1) * br; i++)
                for (int64_t j = cc * bc; j < Lk && j < (cc + 1) * bc; j++)
                    any |= j <= i + Lk - Lq;
            mism += vis[r * cols + cc] != any;
            hidden += !any;
        }
    CHECK(mism == 0);
    CHECK(hidden > 0 && hidden < rows * cols);
    CHECK_STATUS(attn_blockavg_visible(acc, NULL, 2, 3, vis), ATTN_OK);
    CHECK(vis[0] == 1 && vis[63] == 1);
    CHECK_STATUS(attn_blockavg_visible(acc, &c, 1, 3, vis), ATTN_E_SHAPE);
    attn_blockavg_free(acc);
    CHECK_STATUS(attn_blockavg_create(0, 5, 0, 0, 8, &acc), ATTN_E_INVALID);
    CHECK_STATUS(attn_blockavg_create(5, 5, 0, 0, 8, NULL), ATTN_E_INVALID);
    /* rows x cols blocks overflows: refused, not a wrapped allocation */
    acc = NULL;
    CHECK_STATUS(attn_blockavg_create((int64_t)1 << 40, (int64_t)1 << 40, 0, 0,
                                      (int64_t)1 << 40, &acc),
                 ATTN_E_NOMEM);
    CHECK(acc == NULL);
    CHECK_STATUS(
        attn_blockavg_create(INT64_MAX, INT64_MAX, 0, 0, INT64_MAX, &acc),
        ATTN_E_NOMEM);
    CHECK(acc == NULL);
    free(w);
}

/* Long labels cost a bounded width: each is cut to 32 characters (an
 * ellipsis last, counted in characters, not bytes), and a picture past
 * 16384 pixels a side or 64 million pixels is refused with a message. */
static void long_labels(void) {
    float w[16];
    for (int i = 0; i < 16; i++) w[i] = 0.25f;
    attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, 4, 4);
    enum { N = 5000 };
    char *ascii = malloc(N + 1), *wide = malloc(2 * N + 1);
    memset(ascii, 'w', N);
    ascii[N] = 0;
    for (int i = 0; i < N; i++) memcpy(wide + 2 * i, "\xc3\xa9", 2); /* é */
    wide[2 * N] = 0;
    const char *xl[4] = {ascii, "b", wide, "d"},
               *yl[4] = {"a", wide, "c", ascii};
    attn_heatmap_opts o;
    attn_heatmap_opts_init(&o);
    o.x_labels = xl;
    o.y_labels = yl;
    o.title = ascii;
    attn_heatmap_box box, ref;
    CHECK_STATUS(attn_heatmap_measure(&W, 0, 0, &o, &box), ATTN_OK);
    /* the same map with labels of exactly 32 characters, the last "…" */
    char a32[64], w32[96];
    memset(a32, 'w', 31);
    memcpy(a32 + 31, "\xe2\x80\xa6", 4);
    for (int i = 0; i < 31; i++) memcpy(w32 + 2 * i, "\xc3\xa9", 2);
    memcpy(w32 + 62, "\xe2\x80\xa6", 4);
    const char *xr[4] = {a32, "b", w32, "d"}, *yr[4] = {"a", w32, "c", a32};
    attn_heatmap_opts r = o;
    r.x_labels = xr;
    r.y_labels = yr;
    r.title = NULL;
    CHECK_STATUS(attn_heatmap_measure(&W, 0, 0, &r, &ref), ATTN_OK);
    CHECK_MSG(box.width < 3000 && box.height < 1000,
              "a 4 x 4 map with long labels is %d x %d", box.width, box.height);
    CHECK_MSG(box.map_x == ref.map_x && box.cell == ref.cell,
              "labels cut to 32 characters: map at %g (want %g)", box.map_x,
              ref.map_x);
    o.title = NULL;
    CHECK_STATUS(attn_heatmap_write(tmp("long.svg"), &W, 0, 0, &o), ATTN_OK);
    CHECK(file_contains(tmp("long.svg"), w32));
    CHECK(
        !file_contains(tmp("long.svg"), "wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww"));
    free(ascii);
    free(wide);

    /* 64 panels of 512 x 512 cells at 8 pixels: refused, not drawn */
    int L = 512;
    float *big = calloc((size_t)(64 * L * L), sizeof(float));
    attn_tensor B = attn_tensor_4d(big, ATTN_F32, 8, 8, L, L);
    attn_heatmap_opts_init(&o);
    o.cell_px = 8;
    CHECK_STATUS(attn_heatmap_grid_write(tmp("huge.png"), &B, &o),
                 ATTN_E_INVALID);
    CHECK(strstr(attn_last_error(), "larger than drawn") != NULL);
    CHECK(access(tmp("huge.png"), F_OK) != 0);
    free(big);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/attn_viz_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    colormap_anchors();
    small_png();
    nan_and_masked();
    large_maps();
    vector_formats();
    composites();
    panel_titles();
    text_sizes();
    errors();
    blockavg();
    long_labels();
    int rc = check_done("test_viz_heatmap");
    if (rc == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    } else {
        fprintf(stderr, "pictures kept in %s\n", dir);
    }
    return rc;
}

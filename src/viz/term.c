/* The terminal view: a map as UTF-8 text with ANSI colours (24-bit or the
 * xterm 256-colour palette) or plain shades, token labels and a scale line,
 * rendered into the caller's buffer (the library never prints). */
#include "viz_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void attn_term_opts_init(attn_term_opts *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->color = ATTN_TERM_TRUECOLOR;
    o->half_blocks = -1;
    o->width = 80;
}

static const char shades[] = " .:-=+*#%@";
#define FULL_BLOCK "\xe2\x96\x88" /* U+2588 */
#define UPPER_HALF "\xe2\x96\x80" /* U+2580 */

/* nearest xterm-256 entry: the 6x6x6 cube or the 24 greys */
static int xterm256(const uint8_t c[3]) {
    static const int lv[6] = {0, 95, 135, 175, 215, 255};
    int idx[3];
    long dc = 0;
    for (int k = 0; k < 3; k++) {
        int best = 0;
        for (int i = 1; i < 6; i++)
            if (abs(lv[i] - c[k]) < abs(lv[best] - c[k])) best = i;
        idx[k] = best;
        dc += (long)(lv[best] - c[k]) * (lv[best] - c[k]);
    }
    int mean = (c[0] + c[1] + c[2]) / 3;
    int g = (mean - 8 + 5) / 10;
    if (g < 0) g = 0;
    if (g > 23) g = 23;
    int gl = 8 + 10 * g;
    long dg = 0;
    for (int k = 0; k < 3; k++) dg += (long)(gl - c[k]) * (gl - c[k]);
    return dg < dc ? 232 + g : 16 + 36 * idx[0] + 6 * idx[1] + idx[2];
}

typedef struct {
    viz_buf out;
    attn_term_color color;
    double lo, hi;
} term;

static void rgb8(const term *t, double v, int hidden, uint8_t c[3]) {
    double d[3];
    attn__viz_color(ATTN_CMAP_VIRIDIS, v, hidden, t->lo, t->hi, d);
    for (int k = 0; k < 3; k++) c[k] = (uint8_t)lround(d[k] * 255);
}

static void esc(term *t, int bg, const uint8_t c[3]) {
    if (t->color == ATTN_TERM_TRUECOLOR)
        attn__viz_bprintf(&t->out, "\x1b[%d;2;%d;%d;%dm", bg ? 48 : 38, c[0],
                          c[1], c[2]);
    else
        attn__viz_bprintf(&t->out, "\x1b[%d;5;%dm", bg ? 48 : 38, xterm256(c));
}

static char shade(const term *t, double v, int hidden) {
    if (hidden) return 'x';
    if (!isfinite(v)) return '?';
    double u = t->hi > t->lo ? (v - t->lo) / (t->hi - t->lo) : 0.5;
    int i = (int)floor(u * 10);
    if (i < 0) i = 0;
    if (i > 9) i = 9;
    return shades[i];
}

/* One map cell of `width` columns (1 or 2) in the current mode. */
static void cell(term *t, double v, int hidden, int width) {
    if (t->color == ATTN_TERM_PLAIN) {
        char s = shade(t, v, hidden);
        for (int i = 0; i < width; i++) attn__viz_bput(&t->out, &s, 1);
        return;
    }
    uint8_t c[3];
    rgb8(t, v, hidden, c);
    esc(t, 0, c);
    for (int i = 0; i < width; i++) attn__viz_bput(&t->out, FULL_BLOCK, 3);
}

static void reset(term *t) {
    if (t->color != ATTN_TERM_PLAIN) attn__viz_bput(&t->out, "\x1b[0m", 4);
}

/* Number of code points of s (its width for most scripts). */
static int u8len(const char *s) {
    int n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xc0) != 0x80) n++;
    return n;
}

/* Copies at most max code points of s into t's buffer; returns how many. */
static int put_u8(term *t, const char *s, int max) {
    int n = 0;
    const char *p = s;
    while (*p && n < max) {
        const char *q = p + 1;
        while (*q && ((unsigned char)*q & 0xc0) == 0x80) q++;
        /* control characters would corrupt the terminal */
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            attn__viz_bput(&t->out, "?", 1);
        else
            attn__viz_bput(&t->out, p, (size_t)(q - p));
        p = q;
        n++;
    }
    return n;
}

static void pad(term *t, int n) {
    for (int i = 0; i < n; i++) attn__viz_bput(&t->out, " ", 1);
}

#define LABEL_MAX 12 /* code points shown of a row label */
#define XLABEL_MAX 8 /* lines of the downward column labels */

static void scale_line(term *t, int any_hidden, int any_nan) {
    char lo[32], hi[32];
    snprintf(lo, sizeof lo, "%.3g", t->lo);
    snprintf(hi, sizeof hi, "%.3g", t->hi);
    attn__viz_bprintf(&t->out, "scale %s ", lo);
    for (int i = 0; i < 16; i++)
        cell(t, t->lo + (i + 0.5) / 16 * (t->hi - t->lo), 0, 1);
    reset(t);
    attn__viz_bprintf(&t->out, " %s", hi);
    if (any_hidden) {
        attn__viz_bput(&t->out, "   ", 3);
        cell(t, 0, 1, 1);
        reset(t);
        attn__viz_bput(&t->out, " masked", 7);
    }
    if (any_nan) {
        attn__viz_bput(&t->out, "   ", 3);
        cell(t, NAN, 0, 1);
        reset(t);
        attn__viz_bput(&t->out, " NaN/Inf", 8);
    }
    attn__viz_bput(&t->out, "\n", 1);
}

static void render_cells(term *t, const viz_map *m, const attn_term_opts *o,
                         int labels_x, int labels_y, int64_t fr, int64_t fc) {
    int lw = 1;
    char num[32];
    for (int64_t i = 0; i < m->rows; i++) {
        int n;
        if (labels_y)
            n = u8len(o->y_labels[i] ? o->y_labels[i] : "");
        else
            n = snprintf(num, sizeof num, "%lld", (long long)(i * fr));
        if (n > LABEL_MAX) n = LABEL_MAX;
        if (n > lw) lw = n;
    }
    /* column labels of one character stand over their cells; longer ones
     * written downwards were hard to read: the columns then get their
     * numbers and the labels a legend under the map */
    int legend = 0;
    if (labels_x)
        for (int64_t j = 0; j < m->cols; j++)
            if (u8len(o->x_labels[j] ? o->x_labels[j] : "") > 1) legend = 1;
    if (legend) labels_x = 0;
    /* column numbers written downwards, one digit per line */
    int lines = 0;
    for (int64_t j = 0; j < m->cols; j++) {
        int n = labels_x
                    ? u8len(o->x_labels[j] ? o->x_labels[j] : "")
                    : snprintf(num, sizeof num, "%lld", (long long)(j * fc));
        if (n > lines) lines = n;
    }
    if (lines > XLABEL_MAX) lines = XLABEL_MAX;
    for (int k = 0; k < lines; k++) {
        pad(t, lw + 1);
        for (int64_t j = 0; j < m->cols; j++) {
            const char *s =
                labels_x ? (o->x_labels[j] ? o->x_labels[j] : "") : NULL;
            if (!s) {
                snprintf(num, sizeof num, "%lld", (long long)(j * fc));
                s = num;
            }
            /* skip k code points, then print one */
            const char *p = s;
            for (int q = 0; q < k && *p; q++) {
                p++;
                while (*p && ((unsigned char)*p & 0xc0) == 0x80) p++;
            }
            if (*p)
                put_u8(t, p, 1);
            else
                pad(t, 1);
            pad(t, 1);
        }
        attn__viz_bput(&t->out, "\n", 1);
    }
    for (int64_t i = 0; i < m->rows; i++) {
        int n;
        if (labels_y) {
            const char *s = o->y_labels[i] ? o->y_labels[i] : "";
            n = u8len(s);
            if (n > LABEL_MAX) n = LABEL_MAX;
            pad(t, lw - n);
            put_u8(t, s, LABEL_MAX);
        } else {
            n = snprintf(num, sizeof num, "%lld", (long long)(i * fr));
            pad(t, lw - n);
            attn__viz_bput(&t->out, num, (size_t)n);
        }
        pad(t, 1);
        for (int64_t j = 0; j < m->cols; j++)
            cell(t, m->v[i * m->cols + j], m->hidden[i * m->cols + j], 2);
        reset(t);
        attn__viz_bput(&t->out, "\n", 1);
    }
    if (!legend) return;
    /* "keys: 0 The  1 cat  2 sat", wrapped to the terminal's width */
    int col = 0, width = o->width > 0 ? o->width : 80;
    attn__viz_bput(&t->out, "keys:", 5);
    col = 5;
    for (int64_t j = 0; j < m->cols; j++) {
        const char *s = o->x_labels[j] ? o->x_labels[j] : "";
        int n = snprintf(num, sizeof num, "%lld", (long long)j);
        int len = u8len(s);
        if (len > LABEL_MAX) len = LABEL_MAX;
        if (col + 2 + n + 1 + len > width && col > 5) {
            attn__viz_bput(&t->out, "\n     ", 6);
            col = 5;
        }
        pad(t, 2);
        attn__viz_bput(&t->out, num, (size_t)n);
        pad(t, 1);
        put_u8(t, s, LABEL_MAX);
        col += 2 + n + 1 + len;
    }
    attn__viz_bput(&t->out, "\n", 1);
}

static void render_half(term *t, const viz_map *m, int64_t fr, int64_t fc) {
    char num[32];
    int lw = snprintf(num, sizeof num, "%lld", (long long)((m->rows - 1) * fr));
    int plain = t->color == ATTN_TERM_PLAIN;
    int64_t step = plain ? 1 : 2; /* rows per line */
    int64_t line = 0;
    for (int64_t i = 0; i < m->rows; i += step, line++) {
        if (line % 4 == 0) {
            int n = snprintf(num, sizeof num, "%lld", (long long)(i * fr));
            pad(t, lw - n);
            attn__viz_bput(&t->out, num, (size_t)n);
        } else {
            pad(t, lw);
        }
        attn__viz_bput(&t->out, " ", 1);
        for (int64_t j = 0; j < m->cols; j++) {
            int64_t a = i * m->cols + j;
            if (plain) {
                cell(t, m->v[a], m->hidden[a], 1);
                continue;
            }
            uint8_t top[3], bot[3];
            rgb8(t, m->v[a], m->hidden[a], top);
            esc(t, 0, top);
            if (i + 1 < m->rows) {
                rgb8(t, m->v[a + m->cols], m->hidden[a + m->cols], bot);
                esc(t, 1, bot);
            } else {
                attn__viz_bput(&t->out, "\x1b[49m", 5);
            }
            attn__viz_bput(&t->out, UPPER_HALF, 3);
        }
        reset(t);
        attn__viz_bput(&t->out, "\n", 1);
    }
    /* column positions under the map, where they fit */
    pad(t, lw + 1);
    int64_t used = 0;
    double stepc = attn__viz_nice_step((double)(m->cols * fc), 8);
    for (double p = 0; p < (double)(m->cols * fc); p += stepc) {
        int64_t col = (int64_t)(p / (double)fc);
        if (col < used) continue;
        int n = snprintf(num, sizeof num, "%.0f", p);
        if (col + n > m->cols + 4) break;
        pad(t, (int)(col - used));
        attn__viz_bput(&t->out, num, (size_t)n);
        used = col + n + 1;
        attn__viz_bput(&t->out, " ", 1);
    }
    attn__viz_bput(&t->out, "\n", 1);
}

attn_status attn_term_render(const attn_tensor *w, int64_t b, int64_t h,
                             const attn_term_opts *opts, char *buf, size_t cap,
                             size_t *len) {
    attn_term_opts def;
    if (!opts) {
        attn_term_opts_init(&def);
        opts = &def;
    }
    if (!len) return attn__fail(ATTN_E_INVALID, "len is NULL");
    *len = 0;
    if (!buf && cap)
        return attn__fail(ATTN_E_INVALID, "buf is NULL but cap is %zu", cap);
    if (opts->color != ATTN_TERM_PLAIN && opts->color != ATTN_TERM_256 &&
        opts->color != ATTN_TERM_TRUECOLOR)
        return attn__fail(ATTN_E_INVALID, "opts.color %d is not a colour mode",
                          (int)opts->color);
    if (opts->width < 20 || opts->width > 4096)
        return attn__fail(ATTN_E_INVALID, "opts.width %d is outside 20..4096",
                          opts->width);
    if (opts->half_blocks < -1 || opts->half_blocks > 1)
        return attn__fail(ATTN_E_INVALID,
                          "opts.half_blocks %d is not -1, 0 "
                          "or 1",
                          opts->half_blocks);
    if (!isfinite(opts->vmin) || !isfinite(opts->vmax))
        return attn__fail(ATTN_E_INVALID, "opts.vmin/vmax must be finite");
    viz_map m;
    attn_status st = attn__viz_map_load(w, b, h, opts->mask, "w", &m);
    if (st != ATTN_OK) return st;
    int64_t R = m.rows, C = m.cols;

    /* the label column takes up to LABEL_MAX + 1 */
    int64_t avail = opts->width - LABEL_MAX - 2;
    int half = opts->half_blocks;
    if (half < 0) half = R > 40 || C > 40 || 2 * C > avail;
    int64_t maxc = half ? avail : avail / 2;
    if (maxc < 4) maxc = 4;
    st = attn__viz_map_shrink(&m, maxc);
    if (st != ATTN_OK) {
        attn__viz_map_free(&m);
        return st;
    }
    int64_t fr = attn__viz_block(R, maxc), fc = attn__viz_block(C, maxc);

    term t;
    memset(&t, 0, sizeof t);
    t.color = opts->color;
    if (opts->vmin < opts->vmax) {
        t.lo = opts->vmin;
        t.hi = opts->vmax;
    } else {
        attn__viz_auto_scale(&m, 1, ATTN_CMAP_VIRIDIS, &t.lo, &t.hi);
    }
    int any_hidden = 0, any_nan = 0;
    for (int64_t i = 0; i < m.rows * m.cols; i++) {
        if (m.hidden[i])
            any_hidden = 1;
        else if (!isfinite(m.v[i]))
            any_nan = 1;
    }
    if (opts->title) {
        put_u8(&t, opts->title, 1 << 20);
        attn__viz_bput(&t.out, "\n", 1);
    }
    if (half)
        render_half(&t, &m, fr, fc);
    else
        render_cells(&t, &m, opts, opts->x_labels && fc == 1,
                     opts->y_labels && fr == 1, fr, fc);
    scale_line(&t, any_hidden, any_nan);
    attn__viz_map_free(&m);
    if (t.out.oom) {
        attn__viz_buf_free(&t.out);
        return attn__fail(ATTN_E_NOMEM, "out of memory rendering the map");
    }
    *len = t.out.len;
    if (!buf) {
        attn__viz_buf_free(&t.out);
        return ATTN_OK;
    }
    if (cap < t.out.len + 1) {
        attn__viz_buf_free(&t.out);
        return attn__fail(ATTN_E_INVALID,
                          "buffer of %zu bytes is too small: "
                          "%zu needed",
                          cap, *len + 1);
    }
    memcpy(buf, t.out.s, t.out.len + 1);
    attn__viz_buf_free(&t.out);
    return ATTN_OK;
}

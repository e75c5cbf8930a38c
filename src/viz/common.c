/* Shared pieces of src/viz: reading maps out of tensors, block averages,
 * colour maps, tick steps, documents (PNG/SVG/PDF by extension) and text. */
#include "viz_internal.h"
#include "../io/binfile.h"

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int attn__viz_grow(void **p, size_t used, size_t cap, size_t elem) {
    void *q = attn__alloc(cap, elem, "buffer");
    if (!q) return 0;
    if (*p && used) memcpy(q, *p, used * elem);
    attn__free(*p);
    *p = q;
    return 1;
}

/* ------------------------------------------------------------------ */
/* maps                                                               */
/* ------------------------------------------------------------------ */

attn_status attn__viz_same_shape(const attn_tensor *a, const attn_tensor *b) {
    for (int d = 0; d < 4; d++)
        if (a->shape[d] != b->shape[d])
            return attn__fail(ATTN_E_SHAPE,
                              "a and b differ on axis %d: %lld "
                              "vs %lld",
                              d, (long long)a->shape[d],
                              (long long)b->shape[d]);
    return ATTN_OK;
}

attn_status attn__viz_check_weights(const attn_tensor *w, const char *name) {
    if (!w) return attn__fail(ATTN_E_INVALID, "%s is NULL", name);
    attn_status st = attn_tensor_check(w, name);
    if (st != ATTN_OK) return st;
    if (w->dtype != ATTN_F32 && w->dtype != ATTN_F64 && w->dtype != ATTN_F16 &&
        w->dtype != ATTN_BF16)
        return attn__fail(ATTN_E_DTYPE,
                          "%s has dtype %s; weights are f32, "
                          "f64, f16 or bf16",
                          name, attn_dtype_name(w->dtype));
    return ATTN_OK;
}

attn_status attn__viz_map_load(const attn_tensor *w, int64_t b, int64_t h,
                               const attn_mask *mask, const char *name,
                               viz_map *out) {
    if (!out) return attn__fail(ATTN_E_INVALID, "map output is NULL");
    memset(out, 0, sizeof *out);
    attn_status st = attn__viz_check_weights(w, name);
    if (st != ATTN_OK) return st;
    if (b < 0 || b >= w->shape[0] || h < 0 || h >= w->shape[1])
        return attn__fail(ATTN_E_SHAPE,
                          "map (%lld, %lld) is outside %s of "
                          "shape (%lld, %lld, ...)",
                          (long long)b, (long long)h, name,
                          (long long)w->shape[0], (long long)w->shape[1]);
    int64_t R = w->shape[2], C = w->shape[3];
    if (mask) {
        st = attn_mask_check(mask, w->shape[0], w->shape[1], R, C);
        if (st != ATTN_OK) return st;
    }
    int64_t n;
    if (!attn__mul_i64(R, C, &n))
        return attn__fail(ATTN_E_NOMEM, "%s map %lld x %lld overflows", name,
                          (long long)R, (long long)C);
    out->v = attn__alloc((size_t)n, sizeof(double), "map");
    out->hidden = attn__alloc((size_t)n, 1, "map mask");
    if (!out->v || !out->hidden) {
        attn__viz_map_free(out);
        return ATTN_E_NOMEM;
    }
    out->rows = R;
    out->cols = C;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) {
            out->v[i * C + j] = attn_tensor_get(w, b, h, i, j);
            out->hidden[i * C + j] =
                mask ? (uint8_t)!attn_mask_visible(mask, b, h, i, j, R, C) : 0;
        }
    return ATTN_OK;
}

void attn__viz_map_free(viz_map *m) {
    if (!m) return;
    attn__free(m->v);
    attn__free(m->hidden);
    m->v = NULL;
    m->hidden = NULL;
    m->rows = m->cols = 0;
}

attn_status attn__viz_map_shrink(viz_map *m, int64_t max_cells) {
    int64_t fr = attn__viz_block(m->rows, max_cells);
    int64_t fc = attn__viz_block(m->cols, max_cells);
    if (fr == 1 && fc == 1) return ATTN_OK;
    int64_t R = attn__viz_ceil_div(m->rows, fr),
            C = attn__viz_ceil_div(m->cols, fc);
    double *v = attn__alloc((size_t)(R * C), sizeof(double), "block map");
    uint8_t *hid = attn__alloc((size_t)(R * C), 1, "block map mask");
    if (!v || !hid) {
        attn__free(v);
        attn__free(hid);
        return ATTN_E_NOMEM;
    }
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            double sum = 0;
            int64_t cnt = 0;
            int bad = 0;
            for (int64_t i = r * fr; i < m->rows && i < (r + 1) * fr; i++)
                for (int64_t j = c * fc; j < m->cols && j < (c + 1) * fc; j++) {
                    if (m->hidden[i * m->cols + j]) continue;
                    double x = m->v[i * m->cols + j];
                    if (!isfinite(x)) bad = 1;
                    sum += x;
                    cnt++;
                }
            v[r * C + c] = bad ? NAN : (cnt ? sum / (double)cnt : 0.0);
            hid[r * C + c] = (uint8_t)(!bad && cnt == 0);
        }
    attn__free(m->v);
    attn__free(m->hidden);
    m->v = v;
    m->hidden = hid;
    m->rows = R;
    m->cols = C;
    return ATTN_OK;
}

/* ------------------------------------------------------------------ */
/* colour maps                                                        */
/* ------------------------------------------------------------------ */

/* viridis sampled at 11 evenly spaced points (the published colour map,
 * CC0), interpolated linearly in sRGB: within a few levels of the full
 * 256-entry table. */
static const uint8_t viridis11[11][3] = {
    {68, 1, 84},    {72, 37, 118},  {65, 68, 135},  {53, 96, 141},
    {42, 120, 142}, {33, 144, 140}, {34, 168, 132}, {67, 191, 113},
    {122, 209, 81}, {187, 223, 39}, {253, 231, 37}};

/* ColorBrewer RdBu, reversed: blue (low) - white - red (high). */
static const uint8_t diverging9[9][3] = {
    {33, 102, 172},  {67, 147, 195},  {146, 197, 222},
    {209, 229, 240}, {247, 247, 247}, {253, 219, 199},
    {244, 165, 130}, {214, 96, 77},   {178, 24, 43}};

static void ramp(const uint8_t (*tab)[3], int n, double t, double out[3]) {
    double x = t * (n - 1);
    int i = (int)floor(x);
    if (i < 0) i = 0;
    if (i > n - 2) i = n - 2;
    double f = x - i;
    for (int c = 0; c < 3; c++)
        out[c] = ((1 - f) * tab[i][c] + f * tab[i + 1][c]) / 255.0;
}

void attn__viz_rgb_hex(uint32_t hex, double rgb[3]) {
    rgb[0] = ((hex >> 16) & 255) / 255.0;
    rgb[1] = ((hex >> 8) & 255) / 255.0;
    rgb[2] = (hex & 255) / 255.0;
}

static void cmap_eval(attn_colormap cmap, double t, double out[3]) {
    if (isnan(t)) {
        attn__viz_rgb_hex(ATTN_RGB_NAN, out);
        return;
    }
    if (t < 0) t = 0;
    if (t > 1) t = 1;
    if (cmap == ATTN_CMAP_DIVERGING)
        ramp(diverging9, 9, t, out);
    else
        ramp(viridis11, 11, t, out);
}

attn_status attn_colormap_rgb(attn_colormap cmap, double t, uint8_t rgb[3]) {
    if (!rgb) return attn__fail(ATTN_E_INVALID, "rgb is NULL");
    if (cmap != ATTN_CMAP_VIRIDIS && cmap != ATTN_CMAP_DIVERGING)
        return attn__fail(ATTN_E_INVALID, "unknown colour map %d", (int)cmap);
    double c[3];
    cmap_eval(cmap, t, c);
    for (int i = 0; i < 3; i++) rgb[i] = (uint8_t)lround(c[i] * 255.0);
    return ATTN_OK;
}

void attn__viz_color(attn_colormap cmap, double v, int hidden, double lo,
                     double hi, double rgb[3]) {
    if (hidden) {
        attn__viz_rgb_hex(ATTN_RGB_MASKED, rgb);
        return;
    }
    if (!isfinite(v)) {
        attn__viz_rgb_hex(ATTN_RGB_NAN, rgb);
        return;
    }
    cmap_eval(cmap, hi > lo ? (v - lo) / (hi - lo) : 0.5, rgb);
}

void attn__viz_auto_scale(const viz_map *maps, int n, attn_colormap cmap,
                          double *lo, double *hi) {
    double mn = INFINITY, mx = -INFINITY;
    for (int k = 0; k < n; k++) {
        int64_t cnt = maps[k].rows * maps[k].cols;
        for (int64_t i = 0; i < cnt; i++) {
            double x = maps[k].v[i];
            if (maps[k].hidden[i] || !isfinite(x)) continue;
            if (x < mn) mn = x;
            if (x > mx) mx = x;
        }
    }
    if (mn > mx) mn = mx = 0; /* nothing finite */
    if (cmap == ATTN_CMAP_DIVERGING) {
        double m = fmax(fabs(mn), fabs(mx));
        if (m == 0) m = 1;
        *lo = -m;
        *hi = m;
        return;
    }
    if (mn > 0) mn = 0; /* weights: the scale starts at 0 */
    if (mx <= mn) mx = mn + 1;
    *lo = mn;
    *hi = mx;
}

double attn__viz_nice_step(double range, int max_ticks) {
    if (!(range > 0) || max_ticks < 1) return 1;
    double raw = range / max_ticks;
    double p = pow(10, floor(log10(raw)));
    const double mult[4] = {1, 2, 5, 10};
    for (int i = 0; i < 4; i++)
        if (mult[i] * p >= raw * (1 - 1e-9)) return mult[i] * p;
    return 10 * p;
}

/* ------------------------------------------------------------------ */
/* documents                                                          */
/* ------------------------------------------------------------------ */

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    if (n < m) return 0;
    for (size_t i = 0; i < m; i++) {
        char c = s[n - m + i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != suf[i]) return 0;
    }
    return 1;
}

attn_status attn__viz_kind_of(const char *path, viz_kind *kind) {
    if (!path || !path[0]) return attn__fail(ATTN_E_INVALID, "path is empty");
    if (ends_with(path, ".png"))
        *kind = VIZ_PNG;
    else if (ends_with(path, ".svg"))
        *kind = VIZ_SVG;
    else if (ends_with(path, ".pdf"))
        *kind = VIZ_PDF;
    else
        return attn__fail(ATTN_E_INVALID,
                          "'%s': the extension must be .png, "
                          ".svg or .pdf",
                          path);
    return ATTN_OK;
}

/* cairo's stream writer for every format: appends to doc->bytes. */
static cairo_status_t collect(void *closure, const unsigned char *data,
                              unsigned int length) {
    viz_doc *d = closure;
    if (d->bytes_oom) return CAIRO_STATUS_NO_MEMORY;
    if (d->len + length > d->cap) {
        size_t cap = d->cap ? d->cap : 65536;
        while (cap < d->len + length) cap *= 2;
        if (!attn__viz_grow((void **)&d->bytes, d->len, cap, 1)) {
            d->bytes_oom = 1;
            return CAIRO_STATUS_NO_MEMORY;
        }
        d->cap = cap;
    }
    memcpy(d->bytes + d->len, data, length);
    d->len += length;
    return CAIRO_STATUS_SUCCESS;
}

attn_status attn__viz_doc_begin(viz_doc *doc, const char *path, double width,
                                double height) {
    memset(doc, 0, sizeof *doc);
    attn_status st = attn__viz_kind_of(path, &doc->kind);
    if (st != ATTN_OK) return st;
    if (!(width >= 1 && height >= 1 && width <= VIZ_MAX_SIDE &&
          height <= VIZ_MAX_SIDE && width * height <= VIZ_MAX_PIXELS))
        return attn__fail(ATTN_E_INVALID,
                          "a picture of %.0f x %.0f pixels is larger than "
                          "drawn (at most %d a side and %.0f million "
                          "pixels): draw fewer maps, fewer cells "
                          "(max_cells) or smaller cells (cell_px)",
                          width, height, VIZ_MAX_SIDE, VIZ_MAX_PIXELS / 1e6);
    doc->path = path;
    doc->width = ceil(width);
    doc->height = ceil(height);
    switch (doc->kind) {
    case VIZ_PNG:
        doc->surface = cairo_image_surface_create(
            CAIRO_FORMAT_ARGB32, (int)doc->width, (int)doc->height);
        break;
    case VIZ_SVG:
        doc->surface = cairo_svg_surface_create_for_stream(
            collect, doc, doc->width, doc->height);
        /* sized in pixels like the PNG of the same picture (cairo's
         * default unit, pt, shows it a third larger) */
        cairo_svg_surface_set_document_unit(doc->surface, CAIRO_SVG_UNIT_PX);
        break;
    case VIZ_PDF:
        doc->surface = cairo_pdf_surface_create_for_stream(
            collect, doc, doc->width, doc->height);
        break;
    }
    if (cairo_surface_status(doc->surface) != CAIRO_STATUS_SUCCESS) {
        const char *why =
            cairo_status_to_string(cairo_surface_status(doc->surface));
        attn__viz_doc_abort(doc);
        return attn__fail(ATTN_E_NOMEM, "cannot create the surface of '%s': %s",
                          path, why);
    }
    doc->cr = cairo_create(doc->surface);
    cairo_set_source_rgb(doc->cr, 1, 1, 1);
    cairo_paint(doc->cr);
    return ATTN_OK;
}

void attn__viz_doc_abort(viz_doc *doc) {
    if (doc->cr) cairo_destroy(doc->cr);
    if (doc->surface) {
        cairo_surface_finish(doc->surface);
        cairo_surface_destroy(doc->surface);
    }
    attn__free(doc->bytes);
    for (size_t i = 0; i < doc->n_items; i++) attn__free(doc->items[i].s);
    attn__free(doc->items);
    memset(doc, 0, sizeof *doc);
}

static void xml_escape(viz_buf *b, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '<')
            attn__viz_bput(b, "&lt;", 4);
        else if (c == '>')
            attn__viz_bput(b, "&gt;", 4);
        else if (c == '&')
            attn__viz_bput(b, "&amp;", 5);
        else if (c == '"')
            attn__viz_bput(b, "&quot;", 6);
        else if (c < 0x20)
            attn__viz_bput(b, " ", 1);
        else
            attn__viz_bput(b, s, 1);
    }
}

/* Writes cairo's SVG with the invisible text layer before </svg>. */
static attn_status write_svg(viz_doc *doc) {
    size_t end = doc->len;
    const char *tag = "</svg>";
    for (size_t i = doc->len; i >= 6; i--)
        if (memcmp(doc->bytes + i - 6, tag, 6) == 0) {
            end = i - 6;
            break;
        }
    viz_buf b;
    memset(&b, 0, sizeof b);
    attn__viz_bput(&b, (const char *)doc->bytes, end);
    attn__viz_bprintf(&b, "<g id=\"attn-text\" fill-opacity=\"0\" "
                          "font-family=\"DejaVu Sans\">\n");
    for (size_t i = 0; i < doc->n_items; i++) {
        const viz_text_item *t = &doc->items[i];
        attn__viz_bprintf(&b, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"%.1f\"",
                          t->x, t->y, t->size);
        if (t->angle != 0)
            attn__viz_bprintf(&b, " transform=\"rotate(%.1f %.2f %.2f)\"",
                              t->angle, t->x, t->y);
        attn__viz_bput(&b, ">", 1);
        xml_escape(&b, t->s);
        attn__viz_bput(&b, "</text>\n", 8);
    }
    attn__viz_bput(&b, "</g>\n", 5);
    attn__viz_bput(&b, (const char *)doc->bytes + end, doc->len - end);
    attn_status st =
        b.oom
            ? attn__fail(ATTN_E_NOMEM, "'%s': out of memory writing SVG",
                         doc->path)
            : attn__write_atomic(doc->path, (const unsigned char *)b.s, b.len);
    attn__viz_buf_free(&b);
    return st;
}

attn_status attn__viz_doc_end(viz_doc *doc) {
    attn_status st = ATTN_OK;
    cairo_status_t cs = cairo_status(doc->cr);
    cairo_destroy(doc->cr);
    doc->cr = NULL;
    if (cs == CAIRO_STATUS_SUCCESS && doc->kind == VIZ_PNG)
        cs = cairo_surface_write_to_png_stream(doc->surface, collect, doc);
    cairo_surface_finish(doc->surface);
    if (cs == CAIRO_STATUS_SUCCESS) cs = cairo_surface_status(doc->surface);
    if (doc->bad_text[0])
        st = attn__fail(ATTN_E_INVALID,
                        "cannot draw '%s': the label '%s' is not valid UTF-8",
                        doc->path, doc->bad_text);
    else if (cs != CAIRO_STATUS_SUCCESS || doc->bytes_oom || doc->items_oom)
        st = attn__fail(ATTN_E_NOMEM, "cannot draw '%s': %s", doc->path,
                        cs != CAIRO_STATUS_SUCCESS ? cairo_status_to_string(cs)
                                                   : "out of memory");
    else if (doc->kind == VIZ_SVG)
        st = write_svg(doc);
    else
        st = attn__write_atomic(doc->path, doc->bytes, doc->len);
    attn__viz_doc_abort(doc);
    return st;
}

/* ------------------------------------------------------------------ */
/* text                                                               */
/* ------------------------------------------------------------------ */

cairo_t *attn__viz_measure_begin(void) {
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1);
    cairo_t *cr = cairo_create(s);
    cairo_surface_destroy(s); /* the context keeps a reference */
    return cr;
}

void attn__viz_measure_end(cairo_t *cr) { cairo_destroy(cr); }

void attn__viz_font(cairo_t *cr, double size, int bold) {
    cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD
                                : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

const char *attn__viz_clip(const char *s, int max, char *buf, size_t cap) {
    /* a character starts at every byte that is not a continuation byte */
    size_t n = 0, cut = 0;
    for (size_t i = 0; s[i]; i++)
        if (((unsigned char)s[i] & 0xc0) != 0x80) {
            if (n == (size_t)max - 1) cut = i;
            if (++n > (size_t)max) break;
        }
    if (n <= (size_t)max || cut + 4 > cap) return s;
    memcpy(buf, s, cut);
    memcpy(buf + cut, "\xe2\x80\xa6", 4); /* U+2026 and the NUL */
    return buf;
}

double attn__viz_text_width(cairo_t *cr, const char *s) {
    char cut[VIZ_TEXT_BUF];
    s = attn__viz_clip(s, VIZ_TEXT_MAX, cut, sizeof cut);
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    return e.x_advance;
}

void attn__viz_text(viz_doc *doc, const char *s, double x, double y,
                    double size, int bold, double angle, double ax, double ay) {
    char cut[VIZ_TEXT_BUF];
    s = attn__viz_clip(s, VIZ_TEXT_MAX, cut, sizeof cut);
    cairo_t *cr = doc->cr;
    if (!attn__utf8_valid(s)) {
        if (!doc->bad_text[0])
            attn__escape(s, doc->bad_text, sizeof doc->bad_text);
        return;
    }
    attn__viz_font(cr, size, bold);
    cairo_font_extents_t fe;
    cairo_font_extents(cr, &fe);
    double w = attn__viz_text_width(cr, s);
    /* the box is the advance width by ascent + descent */
    double bx = -ax * w, by = -ay * (fe.ascent + fe.descent) + fe.ascent;
    cairo_save(cr);
    cairo_translate(cr, x, y);
    cairo_rotate(cr, angle * VIZ_PI / 180.0);
    cairo_move_to(cr, bx, by);
    cairo_show_text(cr, s);
    cairo_user_to_device(cr, &bx, &by);
    cairo_restore(cr);
    if (doc->kind != VIZ_SVG || doc->items_oom) return;
    if (doc->n_items == doc->cap_items) {
        size_t cap = doc->cap_items ? 2 * doc->cap_items : 64;
        if (!attn__viz_grow((void **)&doc->items, doc->n_items, cap,
                            sizeof *doc->items)) {
            doc->items_oom = 1;
            return;
        }
        doc->cap_items = cap;
    }
    char *copy = attn__alloc(strlen(s) + 1, 1, "text");
    if (!copy) {
        doc->items_oom = 1;
        return;
    }
    strcpy(copy, s);
    doc->items[doc->n_items++] = (viz_text_item){copy, bx, by, size, angle};
}

/* ------------------------------------------------------------------ */
/* growable strings                                                   */
/* ------------------------------------------------------------------ */

void attn__viz_bput(viz_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        if (!attn__viz_grow((void **)&b->s, b->len, cap, 1)) {
            b->oom = 1;
            return;
        }
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void attn__viz_bprintf(viz_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        attn__viz_bput(b, tmp, (size_t)n);
        return;
    }
    char *big = attn__alloc((size_t)n + 1, 1, "text");
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    attn__viz_bput(b, big, (size_t)n);
    attn__free(big);
}

void attn__viz_buf_free(viz_buf *b) {
    attn__free(b->s);
    memset(b, 0, sizeof *b);
}

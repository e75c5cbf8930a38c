/* Heatmaps and composite figures: one or more maps in a grid with a shared
 * colour scale, token labels or position ticks, value annotations, a colour
 * bar, and masked / NaN cells in their own colours. */
#include "viz_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void attn_heatmap_opts_init(attn_heatmap_opts *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->cmap = ATTN_CMAP_VIRIDIS;
    o->annotate = -1;
    o->max_cells = 512;
    o->colorbar = 1;
}

static attn_status check_opts(const attn_heatmap_opts *o) {
    if (o->cmap != ATTN_CMAP_VIRIDIS && o->cmap != ATTN_CMAP_DIVERGING)
        return attn__fail(ATTN_E_INVALID, "opts.cmap %d is not a colour map",
                          (int)o->cmap);
    if (o->max_cells < 8 || o->max_cells > 4096)
        return attn__fail(ATTN_E_INVALID,
                          "opts.max_cells %d is outside "
                          "8..4096",
                          o->max_cells);
    if (o->cell_px < 0 || o->cell_px > 256)
        return attn__fail(ATTN_E_INVALID, "opts.cell_px %d is outside 0..256",
                          o->cell_px);
    if (o->annotate < -1 || o->annotate > 1)
        return attn__fail(ATTN_E_INVALID, "opts.annotate %d is not -1, 0 or 1",
                          o->annotate);
    if (o->x_extent < 0 || o->y_extent < 0)
        return attn__fail(ATTN_E_INVALID,
                          "opts.x_extent %lld / y_extent %lld "
                          "is negative",
                          (long long)o->x_extent, (long long)o->y_extent);
    if (isnan(o->vmin) || isnan(o->vmax) || isinf(o->vmin) || isinf(o->vmax))
        return attn__fail(ATTN_E_INVALID, "opts.vmin/vmax must be finite");
    return ATTN_OK;
}

typedef struct {
    viz_map map;
    int64_t ext_x, ext_y; /* positions the columns / rows stand for */
    int shrunk_x, shrunk_y;
    const char *title;
} panel_data;

/* Everything the drawing needs, measured once. */
typedef struct {
    int n, ncols, nrows;
    int64_t max_r, max_c;
    double cell;
    int xlabels, ylabels; /* token labels drawn */
    double lab_fs, tick_fs, title_fs, ptitle_fs, ann_fs;
    int xrot;
    double ylab_w, xlab_h;
    int annotate;
    const char *ann_fmt;
    double slot_left, slot_top, slot_w, slot_h;
    double margin, top;
    double cb_x, cb_y, cb_h, cb_w, cb_label_x; /* label: 0 = none */
    double lo, hi;
    int any_hidden, any_nan;
    double width, height;
    const char *x_title, *y_title;
} layout;

static double max_label_width(cairo_t *cr, const char *const *labels,
                              int64_t n) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        char cut[VIZ_TEXT_BUF];
        const char *s = attn__viz_clip(labels[i] ? labels[i] : "",
                                       VIZ_LABEL_MAX, cut, sizeof cut);
        double t = attn__viz_text_width(cr, s);
        if (t > w) w = t;
    }
    return w;
}

static void tick_label(char *buf, size_t n, double v, double step) {
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (dec > 6) dec = 6;
    if (fabs(v) < step * 1e-9) v = 0; /* no "-0.00" */
    snprintf(buf, n, "%.*f", dec, v);
}

/* The largest map of the panels, and whether any cell is hidden or not
 * finite (the colour bar then explains them). */
static void measure_maps(const panel_data *pd, int n, layout *L) {
    for (int k = 0; k < n; k++) {
        if (pd[k].map.rows > L->max_r) L->max_r = pd[k].map.rows;
        if (pd[k].map.cols > L->max_c) L->max_c = pd[k].map.cols;
        int64_t cnt = pd[k].map.rows * pd[k].map.cols;
        for (int64_t i = 0; i < cnt; i++) {
            if (pd[k].map.hidden[i])
                L->any_hidden = 1;
            else if (!isfinite(pd[k].map.v[i]))
                L->any_nan = 1;
        }
    }
}

/* The cell size (asked, or fitting the page) and the font sizes. */
static void measure_cells(int n, int ncols, const attn_heatmap_opts *o,
                          layout *L) {
    int64_t side = L->max_r > L->max_c ? L->max_r : L->max_c;
    if (o->cell_px > 0) {
        L->cell = o->cell_px;
    } else {
        double target = n == 1 ? 440 : fmax(110, 900.0 / ncols);
        L->cell = floor(target / (double)side);
        if (L->cell < 1) L->cell = 1;
        if (L->cell > 64) L->cell = 64;
    }
    L->tick_fs = 10;
    L->title_fs = 15;
    L->ptitle_fs = 12;
    L->lab_fs = fmin(12, fmax(7, L->cell - 2));
    L->x_title = o->x_title ? o->x_title : "key";
    L->y_title = o->y_title ? o->y_title : "query";
}

/* Token labels only where each cell is one token and tall enough, else
 * position ticks. Returns 1 when no panel is shrunk (each cell one pair). */
static int measure_labels(cairo_t *cr, const panel_data *pd, int n,
                          const attn_heatmap_opts *o, layout *L) {
    const double cell = L->cell;
    int unshrunk_x = 1, unshrunk_y = 1;
    for (int k = 0; k < n; k++) {
        unshrunk_x &= !pd[k].shrunk_x && pd[k].ext_x == pd[k].map.cols;
        unshrunk_y &= !pd[k].shrunk_y && pd[k].ext_y == pd[k].map.rows;
    }
    L->xlabels = o->x_labels && unshrunk_x && cell >= 8;
    L->ylabels = o->y_labels && unshrunk_y && cell >= 8;
    /* one size for the texts around the map: ticks, axis titles and the
     * colour bar read as large as the token labels beside them */
    if ((L->xlabels || L->ylabels) && L->lab_fs > L->tick_fs)
        L->tick_fs = L->lab_fs;

    attn__viz_font(cr, L->lab_fs, 0);
    cairo_font_extents_t fe;
    cairo_font_extents(cr, &fe);
    double lab_h = fe.ascent + fe.descent;
    if (L->xlabels) {
        double w = max_label_width(cr, o->x_labels, L->max_c);
        L->xrot = w > cell - 2;
        L->xlab_h = L->xrot ? w : lab_h;
    }
    if (L->ylabels) L->ylab_w = max_label_width(cr, o->y_labels, L->max_r);
    attn__viz_font(cr, L->tick_fs, 0);
    cairo_font_extents(cr, &fe);
    double tick_h = fe.ascent + fe.descent;
    if (!L->xlabels) L->xlab_h = tick_h;
    if (!L->ylabels) {
        char buf[32];
        int64_t ext = 1;
        for (int k = 0; k < n; k++)
            if (pd[k].ext_y > ext) ext = pd[k].ext_y;
        snprintf(buf, sizeof buf, "%lld", (long long)ext);
        L->ylab_w = attn__viz_text_width(cr, buf);
    }
    return unshrunk_x && unshrunk_y;
}

/* The colour scale: asked, or over every panel. */
static void measure_scale(const panel_data *pd, int n,
                          const attn_heatmap_opts *o, layout *L) {
    if (o->vmin < o->vmax) {
        L->lo = o->vmin;
        L->hi = o->vmax;
        return;
    }
    viz_map *maps = attn__alloc((size_t)n, sizeof *maps, "maps");
    if (maps) {
        for (int k = 0; k < n; k++) maps[k] = pd[k].map;
        attn__viz_auto_scale(maps, n, o->cmap, &L->lo, &L->hi);
        attn__free(maps);
    } else {
        L->lo = 0;
        L->hi = 1;
    }
}

/* Annotations: small maps, or when asked and the cells can hold them. */
static void measure_annotations(cairo_t *cr, const attn_heatmap_opts *o,
                                int unshrunk, layout *L) {
    const double cell = L->cell;
    double amax = fmax(fabs(L->lo), fabs(L->hi));
    L->ann_fmt = amax < 10 ? "%.2f" : "%.3g";
    if (o->annotate == 1)
        L->annotate = unshrunk && cell >= 14;
    else if (o->annotate == -1)
        L->annotate =
            unshrunk && L->max_r <= 12 && L->max_c <= 12 && cell >= 24;
    if (L->annotate) {
        L->ann_fs = fmin(13, fmax(6, cell * 0.28));
        attn__viz_font(cr, L->ann_fs, 0);
        double w = attn__viz_text_width(cr, amax < 10 ? "-0.00" : "-0.000");
        if (w > cell - 2) L->ann_fs *= (cell - 2) / w;
        if (L->ann_fs < 5) L->annotate = 0;
    }
}

/* One panel's slot: its map with labels, axis titles and panel title. */
static void measure_slots(cairo_t *cr, const panel_data *pd, int n, layout *L) {
    const double cell = L->cell;
    double ytitle_w = L->y_title[0] ? L->tick_fs + 10 : 0;
    double xtitle_h = L->x_title[0] ? L->tick_fs + 10 : 0;
    int any_ptitle = 0;
    for (int k = 0; k < n; k++) any_ptitle |= pd[k].title && pd[k].title[0];
    L->slot_left = ceil(ytitle_w + L->ylab_w + 8);
    L->slot_top = any_ptitle ? ceil(L->ptitle_fs + 10) : 4;
    double map_w = L->max_c * cell, map_h = L->max_r * cell;
    double bottom = 6 + L->xlab_h + xtitle_h;
    L->slot_w = ceil(L->slot_left + map_w + 18);
    L->slot_h = ceil(L->slot_top + map_h + bottom + 8);
    /* a panel title may be wider than its map */
    attn__viz_font(cr, L->ptitle_fs, 0);
    for (int k = 0; k < n; k++)
        if (pd[k].title) {
            double w = attn__viz_text_width(cr, pd[k].title) + 12;
            if (L->slot_left + map_w / 2 + w / 2 > L->slot_w)
                L->slot_w = ceil(L->slot_left + map_w / 2 + w / 2);
        }
}

/* The page: the grid of slots under the title, and the colour bar. */
static void measure_page(cairo_t *cr, const attn_heatmap_opts *o, layout *L) {
    L->margin = 10;
    double title_w = 0;
    if (o->title && o->title[0]) {
        attn__viz_font(cr, L->title_fs, 1);
        title_w = attn__viz_text_width(cr, o->title);
        L->top = L->margin + L->title_fs + 12;
    } else {
        L->top = L->margin;
    }
    double grid_w = L->ncols * L->slot_w, grid_h = L->nrows * L->slot_h;
    L->width = 2 * L->margin + grid_w;
    L->height = L->top + grid_h + L->margin;

    if (o->colorbar) {
        double map_h = L->max_r * L->cell;
        L->cb_x = L->margin + grid_w + 4;
        L->cb_y = L->top + L->slot_top;
        L->cb_h = fmax(120, (L->nrows - 1) * L->slot_h + map_h);
        double step = attn__viz_nice_step(L->hi - L->lo, 5);
        char buf[64];
        attn__viz_font(cr, L->tick_fs, 0);
        double lw = 0;
        for (double t = ceil(L->lo / step) * step; t <= L->hi + step * 1e-9;
             t += step) {
            tick_label(buf, sizeof buf, t, step);
            lw = fmax(lw, attn__viz_text_width(cr, buf));
        }
        if (L->any_hidden || L->any_nan)
            lw = fmax(lw, attn__viz_text_width(cr, "masked"));
        L->cb_w = 14;
        L->width = fmax(L->width, L->cb_x + L->cb_w + 8 + lw + L->margin);
        if (o->colorbar_label && o->colorbar_label[0]) {
            /* written downwards beside the tick labels, centred on the bar */
            L->cb_label_x = L->cb_x + L->cb_w + 8 + lw + 6;
            L->width =
                fmax(L->width, L->cb_label_x + L->tick_fs + 4 + L->margin);
            double lw2 = attn__viz_text_width(cr, o->colorbar_label);
            L->height =
                fmax(L->height, L->cb_y + L->cb_h / 2 + lw2 / 2 + L->margin);
        }
        double bottom_cb = L->cb_y + L->cb_h + 10 +
                           (L->any_hidden + L->any_nan) * 18 + L->margin;
        L->height = fmax(L->height, bottom_cb);
    }
    L->width = fmax(L->width, title_w + 2 * L->margin);
}

/* The layout of a page of n panels in ncols columns, in named steps. */
static void measure(const panel_data *pd, int n, int ncols,
                    const attn_heatmap_opts *o, layout *L) {
    memset(L, 0, sizeof *L);
    cairo_t *cr = attn__viz_measure_begin();
    L->n = n;
    L->ncols = ncols;
    L->nrows = (n + ncols - 1) / ncols;
    measure_maps(pd, n, L);
    measure_cells(n, ncols, o, L);
    int unshrunk = measure_labels(cr, pd, n, o, L);
    measure_scale(pd, n, o, L);
    measure_annotations(cr, o, unshrunk, L);
    measure_slots(cr, pd, n, L);
    measure_page(cr, o, L);
    attn__viz_measure_end(cr);
}

static void set_rgb(cairo_t *cr, const double c[3]) {
    cairo_set_source_rgb(cr, c[0], c[1], c[2]);
}

static void draw_cells(viz_doc *doc, const viz_map *m, double x0, double y0,
                       const layout *L, attn_colormap cmap) {
    cairo_t *cr = doc->cr;
    double cell = L->cell, c[3];
    if (m->rows * m->cols <= 160 * 160) {
        /* rectangles: crisp cells in every format. A viewer that scales an
         * SVG or PDF antialiases each edge, leaving light seams between
         * cells: there each cell reaches half a unit under its right and
         * lower neighbours, which are drawn after it and cover it. */
        const double ov = doc->kind == VIZ_PNG ? 0.0 : 0.5;
        cairo_save(cr);
        cairo_set_antialias(cr, CAIRO_ANTIALIAS_NONE);
        for (int64_t i = 0; i < m->rows; i++)
            for (int64_t j = 0; j < m->cols; j++) {
                int64_t at = i * m->cols + j;
                attn__viz_color(cmap, m->v[at], m->hidden[at], L->lo, L->hi, c);
                set_rgb(cr, c);
                cairo_rectangle(cr, x0 + j * cell, y0 + i * cell,
                                cell + (j + 1 < m->cols ? ov : 0.0),
                                cell + (i + 1 < m->rows ? ov : 0.0));
                cairo_fill(cr);
            }
        cairo_restore(cr);
        return;
    }
    /* large maps: one pixel per cell, scaled up without smoothing */
    cairo_surface_t *img = cairo_image_surface_create(
        CAIRO_FORMAT_RGB24, (int)m->cols, (int)m->rows);
    if (cairo_surface_status(img) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(img);
        return;
    }
    cairo_surface_flush(img);
    unsigned char *px = cairo_image_surface_get_data(img);
    int stride = cairo_image_surface_get_stride(img);
    for (int64_t i = 0; i < m->rows; i++) {
        uint32_t *row = (uint32_t *)(void *)(px + i * stride);
        for (int64_t j = 0; j < m->cols; j++) {
            int64_t at = i * m->cols + j;
            attn__viz_color(cmap, m->v[at], m->hidden[at], L->lo, L->hi, c);
            row[j] = 0xff000000u | ((uint32_t)lround(c[0] * 255) << 16) |
                     ((uint32_t)lround(c[1] * 255) << 8) |
                     (uint32_t)lround(c[2] * 255);
        }
    }
    cairo_surface_mark_dirty(img);
    cairo_save(cr);
    cairo_translate(cr, x0, y0);
    cairo_scale(cr, cell, cell);
    cairo_set_source_surface(cr, img, 0, 0);
    cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
    cairo_rectangle(cr, 0, 0, (double)m->cols, (double)m->rows);
    cairo_fill(cr);
    cairo_restore(cr);
    cairo_surface_destroy(img);
}

static void draw_panel(viz_doc *doc, const panel_data *p, double sx, double sy,
                       const layout *L, const attn_heatmap_opts *o) {
    cairo_t *cr = doc->cr;
    const viz_map *m = &p->map;
    double cell = L->cell;
    double x0 = round(sx + L->slot_left), y0 = round(sy + L->slot_top);
    double pw = m->cols * cell, ph = m->rows * cell;
    /* text colour is set wherever text is drawn: the source left by the
     * previous drawing (white paint, a grey border) would carry over */
    if (p->title && p->title[0]) {
        cairo_set_source_rgb(cr, 0, 0, 0);
        attn__viz_text(doc, p->title, x0 + pw / 2, y0 - 5, L->ptitle_fs, 0, 0,
                       0.5, 1);
    }
    draw_cells(doc, m, x0, y0, L, o->cmap);
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, x0 - 0.5, y0 - 0.5, pw + 1, ph + 1);
    cairo_stroke(cr);

    if (L->annotate) {
        char buf[32];
        double c[3];
        for (int64_t i = 0; i < m->rows; i++)
            for (int64_t j = 0; j < m->cols; j++) {
                int64_t at = i * m->cols + j;
                double v = m->v[at];
                if (m->hidden[at]) continue;
                if (isnan(v))
                    snprintf(buf, sizeof buf, "NaN");
                else if (isinf(v))
                    snprintf(buf, sizeof buf, v > 0 ? "Inf" : "-Inf");
                else
                    snprintf(buf, sizeof buf, L->ann_fmt, v);
                /* a value that rounds to zero shows "0.00", not "-0.00" */
                if (buf[0] == '-' && strspn(buf + 1, "0.") == strlen(buf + 1))
                    memmove(buf, buf + 1, strlen(buf));
                attn__viz_color(o->cmap, v, 0, L->lo, L->hi, c);
                double lum = 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2];
                if (lum < 0.5)
                    cairo_set_source_rgb(cr, 1, 1, 1);
                else
                    cairo_set_source_rgb(cr, 0, 0, 0);
                attn__viz_text(doc, buf, x0 + (j + 0.5) * cell,
                               y0 + (i + 0.5) * cell, L->ann_fs, 0, 0, 0.5,
                               0.5);
            }
    }

    char buf[32], cut[VIZ_TEXT_BUF];
    cairo_set_source_rgb(cr, 0, 0, 0);
    /* columns */
    if (L->xlabels) {
        for (int64_t j = 0; j < m->cols; j++) {
            const char *s = attn__viz_clip(o->x_labels[j] ? o->x_labels[j] : "",
                                           VIZ_LABEL_MAX, cut, sizeof cut);
            double x = x0 + (j + 0.5) * cell;
            if (L->xrot)
                attn__viz_text(doc, s, x, y0 + ph + 4, L->lab_fs, 0, -90, 1,
                               0.5);
            else
                attn__viz_text(doc, s, x, y0 + ph + 4, L->lab_fs, 0, 0, 0.5, 0);
        }
    } else {
        double step = attn__viz_nice_step((double)p->ext_x, pw < 200 ? 4 : 8);
        if (step < 1) step = 1;
        for (double t = 0; t < (double)p->ext_x; t += step) {
            double x = x0 + (t + 0.5) * pw / (double)p->ext_x;
            cairo_move_to(cr, round(x) + 0.5, y0 + ph + 0.5);
            cairo_line_to(cr, round(x) + 0.5, y0 + ph + 4);
            cairo_stroke(cr);
            snprintf(buf, sizeof buf, "%.0f", t);
            attn__viz_text(doc, buf, x, y0 + ph + 5, L->tick_fs, 0, 0, 0.5, 0);
        }
    }
    /* rows */
    if (L->ylabels) {
        for (int64_t i = 0; i < m->rows; i++) {
            const char *s = attn__viz_clip(o->y_labels[i] ? o->y_labels[i] : "",
                                           VIZ_LABEL_MAX, cut, sizeof cut);
            attn__viz_text(doc, s, x0 - 4, y0 + (i + 0.5) * cell, L->lab_fs, 0,
                           0, 1, 0.5);
        }
    } else {
        double step = attn__viz_nice_step((double)p->ext_y, ph < 200 ? 4 : 8);
        if (step < 1) step = 1;
        for (double t = 0; t < (double)p->ext_y; t += step) {
            double y = y0 + (t + 0.5) * ph / (double)p->ext_y;
            cairo_move_to(cr, x0 - 0.5, round(y) + 0.5);
            cairo_line_to(cr, x0 - 4, round(y) + 0.5);
            cairo_stroke(cr);
            snprintf(buf, sizeof buf, "%.0f", t);
            attn__viz_text(doc, buf, x0 - 5, y, L->tick_fs, 0, 0, 1, 0.5);
        }
    }
    cairo_set_source_rgb(cr, 0, 0, 0);
    if (L->x_title[0])
        attn__viz_text(doc, L->x_title, x0 + pw / 2,
                       y0 + ph + 6 + L->xlab_h + 2, L->tick_fs, 0, 0, 0.5, 0);
    if (L->y_title[0])
        attn__viz_text(doc, L->y_title, sx + 2, y0 + ph / 2, L->tick_fs, 0, -90,
                       0.5, 0);
}

static void draw_colorbar(viz_doc *doc, const layout *L,
                          const attn_heatmap_opts *o) {
    cairo_t *cr = doc->cr;
    double x = L->cb_x, y = L->cb_y, h = L->cb_h, w = L->cb_w, c[3];
    cairo_pattern_t *g = cairo_pattern_create_linear(0, y + h, 0, y);
    for (int i = 0; i <= 32; i++) {
        double t = i / 32.0;
        attn__viz_color(o->cmap, L->lo + t * (L->hi - L->lo), 0, L->lo, L->hi,
                        c);
        cairo_pattern_add_color_stop_rgb(g, t, c[0], c[1], c[2]);
    }
    cairo_rectangle(cr, x, y, w, h);
    cairo_set_source(cr, g);
    cairo_fill(cr);
    cairo_pattern_destroy(g);
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, x - 0.5, y - 0.5, w + 1, h + 1);
    cairo_stroke(cr);
    double step = attn__viz_nice_step(L->hi - L->lo, 5);
    char buf[64];
    cairo_set_source_rgb(cr, 0, 0, 0);
    for (double t = ceil(L->lo / step) * step; t <= L->hi + step * 1e-9;
         t += step) {
        double ty = round(y + h - (t - L->lo) / (L->hi - L->lo) * h) + 0.5;
        cairo_move_to(cr, x + w, ty);
        cairo_line_to(cr, x + w + 4, ty);
        cairo_stroke(cr);
        tick_label(buf, sizeof buf, t, step);
        attn__viz_text(doc, buf, x + w + 6, ty, L->tick_fs, 0, 0, 0, 0.5);
    }
    if (L->cb_label_x > 0)
        attn__viz_text(doc, o->colorbar_label, L->cb_label_x, y + h / 2,
                       L->tick_fs, 0, 90, 0.5, 1);
    double ly = y + h + 12;
    for (int k = 0; k < 2; k++) {
        if (k == 0 && !L->any_hidden) continue;
        if (k == 1 && !L->any_nan) continue;
        attn__viz_rgb_hex(k == 0 ? ATTN_RGB_MASKED : ATTN_RGB_NAN, c);
        set_rgb(cr, c);
        cairo_rectangle(cr, x, ly, w, 12);
        cairo_fill(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        attn__viz_text(doc, k == 0 ? "masked" : "NaN", x + w + 6, ly + 6,
                       L->tick_fs, 0, 0, 0, 0.5);
        ly += 18;
    }
}

/* Loads, measures and (when path is not NULL) draws a figure; box, if not
 * NULL, receives the geometry. */
static attn_status figure(const char *path, const attn_panel *panels, int n,
                          int ncols, const attn_heatmap_opts *opts,
                          attn_heatmap_box *box) {
    attn_heatmap_opts def;
    if (!opts) {
        attn_heatmap_opts_init(&def);
        opts = &def;
    }
    attn_status st = ATTN_OK;
    if (path) {
        viz_kind kind;
        st = attn__viz_kind_of(path, &kind);
        if (st != ATTN_OK) return st;
    }
    if (!panels || n < 1 || n > 4096)
        return attn__fail(ATTN_E_INVALID,
                          "a figure needs 1..4096 panels, got "
                          "%d%s",
                          n, panels ? "" : " (panels is NULL)");
    if (ncols < 1) return attn__fail(ATTN_E_INVALID, "ncols %d < 1", ncols);
    if (ncols > n) ncols = n;
    st = check_opts(opts);
    if (st != ATTN_OK) return st;

    panel_data *pd = attn__alloc((size_t)n, sizeof *pd, "panels");
    if (!pd) return ATTN_E_NOMEM;
    memset(pd, 0, (size_t)n * sizeof *pd);
    for (int k = 0; k < n && st == ATTN_OK; k++) {
        const attn_panel *p = &panels[k];
        const attn_mask *mask = p->mask ? p->mask : opts->mask;
        st =
            attn__viz_map_load(p->w, p->b, p->h, mask, "panel map", &pd[k].map);
        if (st != ATTN_OK) break;
        if (k > 0 && opts->x_labels && pd[k].map.cols != pd[0].map.cols)
            st = attn__fail(ATTN_E_SHAPE,
                            "panel %d has %lld keys but panel 0 "
                            "has %lld: labels need equal shapes",
                            k, (long long)pd[k].map.cols,
                            (long long)pd[0].map.cols);
        if (k > 0 && opts->y_labels && pd[k].map.rows != pd[0].map.rows)
            st = attn__fail(ATTN_E_SHAPE,
                            "panel %d has %lld queries but panel "
                            "0 has %lld: labels need equal shapes",
                            k, (long long)pd[k].map.rows,
                            (long long)pd[0].map.rows);
        if (st != ATTN_OK) break;
        int64_t R = pd[k].map.rows, C = pd[k].map.cols;
        pd[k].ext_x = opts->x_extent > 0 ? opts->x_extent : C;
        pd[k].ext_y = opts->y_extent > 0 ? opts->y_extent : R;
        if (pd[k].ext_x < C || pd[k].ext_y < R) {
            st = attn__fail(ATTN_E_INVALID,
                            "opts.x_extent/y_extent (%lld, %lld) "
                            "is smaller than the map (%lld x %lld)",
                            (long long)pd[k].ext_x, (long long)pd[k].ext_y,
                            (long long)R, (long long)C);
            break;
        }
        st = attn__viz_map_shrink(&pd[k].map, opts->max_cells);
        pd[k].shrunk_x = pd[k].map.cols != C;
        pd[k].shrunk_y = pd[k].map.rows != R;
        pd[k].title = p->title;
    }
    if (st == ATTN_OK) {
        layout L;
        measure(pd, n, ncols, opts, &L);
        if (box) {
            box->width = (int)ceil(L.width);
            box->height = (int)ceil(L.height);
            box->map_x = round(L.margin + L.slot_left);
            box->map_y = round(L.top + L.slot_top);
            box->cell = L.cell;
            box->rows = pd[0].map.rows;
            box->cols = pd[0].map.cols;
            box->vmin = L.lo;
            box->vmax = L.hi;
        }
        viz_doc doc;
        if (path) st = attn__viz_doc_begin(&doc, path, L.width, L.height);
        if (path && st == ATTN_OK) {
            if (opts->title && opts->title[0]) {
                cairo_set_source_rgb(doc.cr, 0, 0, 0);
                attn__viz_text(&doc, opts->title, L.width / 2, L.margin,
                               L.title_fs, 1, 0, 0.5, 0);
            }
            for (int k = 0; k < n; k++)
                draw_panel(&doc, &pd[k], L.margin + (k % ncols) * L.slot_w,
                           L.top + (double)(k / ncols) * L.slot_h, &L, opts);
            if (opts->colorbar) draw_colorbar(&doc, &L, opts);
            st = attn__viz_doc_end(&doc);
        }
    }
    for (int k = 0; k < n; k++) attn__viz_map_free(&pd[k].map);
    attn__free(pd);
    return st;
}

attn_status attn_figure_write(const char *path, const attn_panel *panels, int n,
                              int ncols, const attn_heatmap_opts *opts) {
    if (!path) return attn__fail(ATTN_E_INVALID, "path is NULL");
    return figure(path, panels, n, ncols, opts, NULL);
}

attn_status attn_heatmap_write(const char *path, const attn_tensor *w,
                               int64_t b, int64_t h,
                               const attn_heatmap_opts *opts) {
    if (!path) return attn__fail(ATTN_E_INVALID, "path is NULL");
    attn_panel p = {w, b, h, NULL, NULL};
    return figure(path, &p, 1, 1, opts, NULL);
}

attn_status attn_heatmap_measure(const attn_tensor *w, int64_t b, int64_t h,
                                 const attn_heatmap_opts *opts,
                                 attn_heatmap_box *box) {
    if (!box) return attn__fail(ATTN_E_INVALID, "box is NULL");
    attn_panel p = {w, b, h, NULL, NULL};
    return figure(NULL, &p, 1, 1, opts, box);
}

attn_status attn_heatmap_grid_write(const char *path, const attn_tensor *w,
                                    const attn_heatmap_opts *opts) {
    attn_status st = attn__viz_check_weights(w, "w");
    if (st != ATTN_OK) return st;
    int64_t N = w->shape[0], H = w->shape[1], n;
    if (!attn__mul_i64(N, H, &n) || n > 4096)
        return attn__fail(ATTN_E_SHAPE,
                          "w has %lld x %lld maps; a grid holds "
                          "at most 4096",
                          (long long)N, (long long)H);
    attn_panel *p = attn__alloc((size_t)n, sizeof *p, "panels");
    char *titles = attn__alloc((size_t)n, 64, "titles");
    if (!p || !titles) {
        attn__free(p);
        attn__free(titles);
        return ATTN_E_NOMEM;
    }
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < H; j++) {
            char *t = titles + (i * H + j) * 64;
            if (N == 1)
                snprintf(t, 64, "head %lld", (long long)j);
            else
                snprintf(t, 64, "batch %lld, head %lld", (long long)i,
                         (long long)j);
            p[i * H + j] = (attn_panel){w, i, j, t, NULL};
        }
    /* one row of heads reads well up to 4; more heads of one layer wrap */
    int ncols = N == 1 && H > 4 ? (int)((H + 1) / 2) : (int)H;
    st = attn_figure_write(path, p, (int)n, ncols, opts);
    attn__free(p);
    attn__free(titles);
    return st;
}

attn_status attn_diff_write(const char *path, const attn_tensor *a,
                            const attn_tensor *b,
                            const attn_heatmap_opts *opts) {
    if (!a || !b)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", a ? "b" : "a");
    attn_status st = attn_tensor_check(a, "a");
    if (st == ATTN_OK) st = attn_tensor_check(b, "b");
    if (st != ATTN_OK) return st;
    if ((st = attn__viz_same_shape(a, b))) return st;
    int64_t n = attn_tensor_numel(a);
    if (n <= 0) return attn__fail(ATTN_E_SHAPE, "a has no elements");
    double *d = attn__alloc((size_t)n, sizeof(double), "difference");
    if (!d) return ATTN_E_NOMEM;
    int64_t at = 0;
    for (int64_t i0 = 0; i0 < a->shape[0]; i0++)
        for (int64_t i1 = 0; i1 < a->shape[1]; i1++)
            for (int64_t i2 = 0; i2 < a->shape[2]; i2++)
                for (int64_t i3 = 0; i3 < a->shape[3]; i3++)
                    d[at++] = attn_tensor_get(a, i0, i1, i2, i3) -
                              attn_tensor_get(b, i0, i1, i2, i3);
    attn_heatmap_opts o;
    if (opts)
        o = *opts;
    else
        attn_heatmap_opts_init(&o);
    o.cmap = ATTN_CMAP_DIVERGING;
    attn_tensor D = attn_tensor_4d(d, ATTN_F64, a->shape[0], a->shape[1],
                                   a->shape[2], a->shape[3]);
    if (a->shape[0] * a->shape[1] == 1)
        st = attn_heatmap_write(path, &D, 0, 0, &o);
    else
        st = attn_heatmap_grid_write(path, &D, &o);
    attn__free(d);
    return st;
}

/* Internal pieces shared by the picture and diagnostics files of src/viz.
 * Nothing here computes attention: maps are read from weight tensors. */
#ifndef ATTN_VIZ_INTERNAL_H
#define ATTN_VIZ_INTERNAL_H

#include "attn_viz.h"
#include "internal.h"

#include <cairo.h>
#include <stddef.h>
#include <stdint.h>

/* One 2-D map read out of a tensor as doubles, row-major. hidden[i] = 1
 * where the mask hides the cell (or a block has no visible cell). */
typedef struct {
    int64_t rows, cols;
    double *v;
    uint8_t *hidden;
} viz_map;

/* w is a valid tensor of a floating dtype (f32, f64, f16, bf16): the
 * check every reader of weights starts with. */
attn_status attn__viz_check_weights(const attn_tensor *w, const char *name);
/* ATTN_E_SHAPE naming the first axis on which a and b differ. */
attn_status attn__viz_same_shape(const attn_tensor *a, const attn_tensor *b);

/* Checks w (attn__viz_check_weights), b, h and mask, and reads the map w[b, h]. */
attn_status attn__viz_map_load(const attn_tensor *w, int64_t b, int64_t h,
                               const attn_mask *mask, const char *name,
                               viz_map *out);
void attn__viz_map_free(viz_map *m);

/* ceil(n / d) for n >= 0, d >= 1, without the overflow of n + d - 1. */
static inline int64_t attn__viz_ceil_div(int64_t n, int64_t d) {
    return n / d + (n % d != 0);
}

/* Block factor for n positions shown in at most max_cells: ceil(n / max). */
static inline int64_t attn__viz_block(int64_t n, int64_t max_cells) {
    return attn__viz_ceil_div(n, max_cells);
}

/* Block averages over visible cells so each axis has at most max_cells;
 * a block holding a NaN/Inf is NaN, one with no visible cell is hidden.
 * Replaces m in place (no-op when m already fits). */
attn_status attn__viz_map_shrink(viz_map *m, int64_t max_cells);

/* Colour of v on the scale [lo, hi]: hidden or non-finite get their
 * fixed colours. Components in [0, 1]. */
void attn__viz_color(attn_colormap cmap, double v, int hidden, double lo,
                     double hi, double rgb[3]);
void attn__viz_rgb_hex(uint32_t hex, double rgb[3]);

/* Colour scale from the finite visible values of maps (see the header). */
void attn__viz_auto_scale(const viz_map *maps, int n, attn_colormap cmap,
                          double *lo, double *hi);

/* "Nice" tick step for a range so that it holds at most max_ticks ticks. */
double attn__viz_nice_step(double range, int max_ticks);

/* ---- documents: a cairo surface chosen by the file extension whose bytes
 * are collected in memory (with the SVG text layer on the side) and
 * written at the end with attn__write_atomic ---- */
typedef struct {
    char *s;
    double x, y, size, angle; /* baseline start, degrees */
} viz_text_item;

typedef enum { VIZ_PNG, VIZ_SVG, VIZ_PDF } viz_kind;

typedef struct {
    viz_kind kind;
    const char *path;
    cairo_surface_t *surface;
    cairo_t *cr;
    double width, height;
    /* the file's bytes as cairo writes them (every format); SVG text items
     * are spliced in at the end */
    unsigned char *bytes;
    size_t len, cap;
    int bytes_oom;
    viz_text_item *items;
    size_t n_items, cap_items;
    int items_oom;
    /* the first text that is not valid UTF-8 (escaped), never drawn:
     * reported as the caller's mistake, not as cairo's failure */
    char bad_text[80];
} viz_doc;

/* Picks the format from path's extension (ATTN_E_INVALID if none fits). */
attn_status attn__viz_kind_of(const char *path, viz_kind *kind);
/* Creates the surface and context of width x height points (pixels). */
attn_status attn__viz_doc_begin(viz_doc *doc, const char *path, double width,
                                double height);
/* Finishes and writes the file; frees everything (also on failure). */
attn_status attn__viz_doc_end(viz_doc *doc);
/* Frees without writing (after a failure while drawing). */
void attn__viz_doc_abort(viz_doc *doc);

/* A context for measuring text before the document exists. */
cairo_t *attn__viz_measure_begin(void);
void attn__viz_measure_end(cairo_t *cr);

/* What a text may cost: token labels are cut to VIZ_LABEL_MAX characters
 * and every other text (titles) to VIZ_TEXT_MAX, the last kept character
 * an ellipsis, so that long labels cannot make a map's picture huge. */
#define VIZ_LABEL_MAX 32
#define VIZ_TEXT_MAX 160
/* Bytes a text cut to VIZ_TEXT_MAX characters needs (4 a character). */
#define VIZ_TEXT_BUF (4 * VIZ_TEXT_MAX + 4)
/* The largest picture drawn: each side and the area in pixels. */
#define VIZ_MAX_SIDE 16384
#define VIZ_MAX_PIXELS (64.0 * 1024 * 1024)
/* s if it has at most max characters (UTF-8 code points), else its first
 * max - 1 characters and an ellipsis in buf (cap >= 4 * max + 4). */
const char *attn__viz_clip(const char *s, int max, char *buf, size_t cap);

/* Sets DejaVu Sans at size (bold if bold). */
void attn__viz_font(cairo_t *cr, double size, int bold);
/* Advance width of s at the current font. */
double attn__viz_text_width(cairo_t *cr, const char *s);
/* Draws s so that its anchor (ax, ay in 0..1 of the text box: 0,0 = top
 * left, 0.5,0.5 = centre) lies at (x, y) after rotating by angle degrees
 * about that point; records it for the SVG text layer when doc is SVG. */
void attn__viz_text(viz_doc *doc, const char *s, double x, double y,
                    double size, int bold, double angle, double ax, double ay);

/* A growable string: attn__viz_bprintf / attn__viz_bput append; on allocation
 * failure oom is set, later appends do nothing and the caller reports
 * ATTN_E_NOMEM. */
typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} viz_buf;
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void attn__viz_bprintf(viz_buf *b, const char *fmt, ...);
void attn__viz_bput(viz_buf *b, const char *s, size_t n);
void attn__viz_buf_free(viz_buf *b);

/* Replaces *p (used elements of size elem) by a buffer of cap elements;
 * 0 on failure (then *p is unchanged). attn__alloc has no realloc. */
int attn__viz_grow(void **p, size_t used, size_t cap, size_t elem);

#define VIZ_PI 3.14159265358979323846

#endif

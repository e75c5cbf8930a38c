/*
 * attn_viz.h: pictures and diagnostics of attention weights, on top of
 * attn.h.
 *
 * Contents:
 *   Pictures         attn_heatmap_write, attn_heatmap_grid_write,
 *                    attn_diff_write, attn_figure_write, attn_geometry_write
 *   Long sequences   attn_blockavg (block averages of streamed weight tiles)
 *   Terminal view    attn_term_render
 *   HTML viewer      attn_html_write
 *   Diagnostics      attn_stats_compute, attn_stats_verdict,
 *                    attn_compare_weights
 */
#ifndef ATTN_VIZ_H
#define ATTN_VIZ_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================== */
/* Pictures and diagnostics                                    */
/* ===================================================================== */

/*
 * Everything here READS weights; nothing computes attention. A "map" is the
 * 2-D slice w[b, h, :, :] of a weights tensor of shape (N, H, Lq, Lk): rows
 * are queries, columns keys, and the first axis is the batch entry or the
 * layer. Maps may be f32, f64, f16 or bf16, with any strides.
 *
 * Pictures are drawn with cairo; the file's extension picks the format:
 * .png, .svg or .pdf (anything else is ATTN_E_INVALID). Text uses the
 * DejaVu Sans font (Debian fonts-dejavu-core). SVG files carry their labels
 * twice: as glyph outlines that draw them, and as an invisible <text> layer
 * that makes them searchable and selectable (cairo itself writes only
 * outlines). Pictures and HTML pages are drawn in memory and written to a
 * temporary name, then renamed: a failed call never leaves half a file.
 *
 * Example: an annotated heatmap of a 3 x 3 map with token labels.
 *
 *     const char *tok[3] = {"I", "like", "tea"};
 *     float w[9] = {1, 0, 0, 0.5f, 0.5f, 0, 0.2f, 0.3f, 0.5f}; // rows sum 1
 *     attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, 3, 3);
 *     attn_heatmap_opts ho;
 *     attn_heatmap_opts_init(&ho);
 *     ho.title = "self-attention"; ho.x_labels = tok; ho.y_labels = tok;
 *     attn_status st = attn_heatmap_write("w.png", &W, 0, 0, &ho);
 *     if (st != ATTN_OK) {
 *         fprintf(stderr, "%s\n", attn_last_error());
 *         return 1;
 *     }
 */

/* Colour maps: viridis for weights, a blue-white-red diverging one for
 * differences (white at the middle of the scale). */
typedef enum { ATTN_CMAP_VIRIDIS = 0, ATTN_CMAP_DIVERGING = 1 } attn_colormap;

/* Colours of cells that are not values, as 0xRRGGBB. */
#define ATTN_RGB_NAN 0xff00ffu    /* NaN or Inf: magenta               */
#define ATTN_RGB_MASKED 0x8c8c8cu /* masked by the mask given: grey    */

/* sRGB colour of t in [0, 1] (clamped) under cmap; a NaN t gives
 * ATTN_RGB_NAN. Errors: ATTN_E_INVALID (rgb NULL, unknown cmap). */
ATTN_API attn_status attn_colormap_rgb(attn_colormap cmap, double t,
                                       uint8_t rgb[3]);

typedef struct {
    const char *title;   /* over the figure; NULL: none                    */
    const char *x_title; /* under the columns; NULL: "key", "": none       */
    const char *y_title; /* left of the rows; NULL: "query", "": none      */
    /* Token labels: x_labels[Lk] for the columns, y_labels[Lq] for the
     * rows, or NULL for position ticks. Long column labels are rotated. */
    const char *const *x_labels;
    const char *const *y_labels;
    attn_colormap cmap; /* default VIRIDIS                               */
    /* Colour scale. vmin >= vmax (the default 0, 0): from the data, with 0
     * as the low end for VIRIDIS when no value is negative, and symmetric
     * around 0 for DIVERGING. */
    double vmin, vmax;
    int annotate;  /* values in cells: -1 auto (maps up to 12 x 12), 0, 1  */
    int max_cells; /* most cells drawn per side (default 512, 8..4096);
                      longer axes are averaged in blocks                  */
    int cell_px;   /* side of a cell in pixels; 0: auto from the size      */
    int colorbar;  /* 1 (default): draw the colour bar with ticks          */
    /* Positions the columns and rows stand for (0: Lk and Lq). Set them
     * when the map is already block-averaged (attn_blockavg) so that the
     * ticks read positions of the full sequence. */
    int64_t x_extent, y_extent;
    /* Cells that this mask hides are drawn in ATTN_RGB_MASKED and left out
     * of block averages and of the automatic colour scale. NULL: none.
     * It is checked against the map tensor's (N, H, Lq, Lk). */
    const attn_mask *mask;
    /* Written along the colour bar (e.g. how its scale was chosen); NULL
     * or "": none. */
    const char *colorbar_label;
} attn_heatmap_opts;

/* Defaults as described above. */
ATTN_API void attn_heatmap_opts_init(attn_heatmap_opts *opts);

/* Draws the map w[b, h] to path. Errors: ATTN_E_INVALID (NULL arguments,
 * unknown extension, bad options), ATTN_E_SHAPE (b, h out of range, mask
 * shapes), ATTN_E_DTYPE, ATTN_E_IO (the file could not be written),
 * ATTN_E_NOMEM. */
ATTN_API attn_status attn_heatmap_write(const char *path, const attn_tensor *w,
                                        int64_t b, int64_t h,
                                        const attn_heatmap_opts *opts);

/* Where attn_heatmap_write puts things, for overlays and tests: the
 * picture's size in pixels, the top-left corner of the map's first cell,
 * the side of a cell, the cells drawn (after block averaging) and the
 * colour scale used. */
typedef struct {
    int width, height;
    double map_x, map_y, cell;
    int64_t rows, cols;
    double vmin, vmax;
} attn_heatmap_box;

/* The geometry attn_heatmap_write would use for the same arguments; draws
 * nothing. Errors as attn_heatmap_write. */
ATTN_API attn_status attn_heatmap_measure(const attn_tensor *w, int64_t b,
                                          int64_t h,
                                          const attn_heatmap_opts *opts,
                                          attn_heatmap_box *box);

/* One panel of a composite figure: the map w[b, h] with its own title
 * (NULL: none) and mask (NULL: opts->mask). */
typedef struct {
    const attn_tensor *w;
    int64_t b, h;
    const char *title;
    const attn_mask *mask;
} attn_panel;

/* Draws n panels in a grid of ncols columns with ONE shared colour scale
 * and one colour bar (scaled vs unscaled side by side, heads x layers).
 * opts->title heads the figure; its labels apply to every panel, which then
 * must all have the same Lq and Lk. */
ATTN_API attn_status attn_figure_write(const char *path,
                                       const attn_panel *panels, int n,
                                       int ncols,
                                       const attn_heatmap_opts *opts);

/* Every map of w (N, H, Lq, Lk) as a grid: one row per entry of the first
 * axis, one column per head (a single row of more than 4 heads wraps onto
 * two rows), shared colour scale. Panels are titled "batch n, head h" (the
 * (B, H, Lq, Lk) of attention weights; "head h" when N = 1); to name the
 * axes otherwise (layers), draw the panels with attn_figure_write. */
ATTN_API attn_status attn_heatmap_grid_write(const char *path,
                                             const attn_tensor *w,
                                             const attn_heatmap_opts *opts);

/* The difference a - b of two weight tensors of the same shape, every
 * map in a grid as attn_heatmap_grid_write, in the DIVERGING colour map
 * with a scale symmetric around 0 (unless opts->vmin < opts->vmax). */
ATTN_API attn_status attn_diff_write(const char *path, const attn_tensor *a,
                                     const attn_tensor *b,
                                     const attn_heatmap_opts *opts);

/* The geometry of a dot product in 2-D: arrows from the origin to a and b
 * on a grid, a legend with their names (NULL: "a", "b"), and the dot
 * product and cosine in the title. A zero vector has no cosine ("n/a"). */
ATTN_API attn_status attn_geometry_write(const char *path, const double a[2],
                                         const double b[2], const char *a_name,
                                         const char *b_name);

/* --- Long sequences: block averages of streamed weight tiles --------- */

/* Accumulates the tiles of ONE map (b, h) of an Lq x Lk attention into
 * block averages of at most max_cells x max_cells, so that a heatmap of
 * L = 16384 never holds the L x L matrix. Feed it with
 * attn_sdpa_weight_tiles(..., attn_blockavg_tile, acc). */
typedef struct attn_blockavg attn_blockavg;

/* Errors: ATTN_E_INVALID (NULL out, sizes < 1, max_cells < 1),
 * ATTN_E_NOMEM. */
ATTN_API attn_status attn_blockavg_create(int64_t Lq, int64_t Lk, int64_t b,
                                          int64_t h, int64_t max_cells,
                                          attn_blockavg **out);
ATTN_API void attn_blockavg_free(attn_blockavg *acc);

/* An attn_weight_tile_fn: adds the tile to the blocks if (b, h) is the
 * accumulator's map; tiles of other maps are ignored. Returns 0. */
ATTN_API int attn_blockavg_tile(void *acc, int64_t b, int64_t h, int64_t q0,
                                int64_t nq, int64_t k0, int64_t nk,
                                const float *w, int64_t ldw);

/* Size of the averaged map: rows x cols blocks of block_rows x block_cols
 * positions (the last block of an axis may be shorter). */
ATTN_API attn_status attn_blockavg_size(const attn_blockavg *acc, int64_t *rows,
                                        int64_t *cols, int64_t *block_rows,
                                        int64_t *block_cols);

/* Writes the averages (rows x cols f32, row-major) and, if seen is not
 * NULL, seen[r * cols + c] = 1 when any weight of the block was delivered
 * (blocks whose tiles the kernel skipped as fully masked get 0 and
 * average 0). Use seen as a keep mask to draw them as masked. */
ATTN_API attn_status attn_blockavg_result(const attn_blockavg *acc, float *map,
                                          uint8_t *seen);

/* visible[r * cols + c] = 1 when the mask (checked against (B, H, Lq, Lk))
 * leaves any pair of block (r, c) of the accumulator's map visible, so that
 * blocks the mask removes entirely can be drawn as masked. Reads the mask
 * only (it stops at the first visible pair of a block). mask NULL: all 1. */
ATTN_API attn_status attn_blockavg_visible(const attn_blockavg *acc,
                                           const attn_mask *mask, int64_t B,
                                           int64_t H, uint8_t *visible);

/* --- Terminal view ---------------------------------------------------- */

typedef enum {
    ATTN_TERM_PLAIN = 0,    /* no colour: shades " .:-=+*#%@"           */
    ATTN_TERM_256 = 1,      /* xterm 256-colour escapes                 */
    ATTN_TERM_TRUECOLOR = 2 /* 24-bit colour escapes                    */
} attn_term_color;

typedef struct {
    attn_term_color color; /* default TRUECOLOR                     */
    /* Layout: 0 one cell = two columns x one line, with a label per row
     * and the column labels over the columns (labels longer than one
     * character: column numbers and a legend line of the keys under the
     * map); 1 Unicode half blocks, one
     * column x half a line per cell, position ticks only (dense maps);
     * -1 (default): half blocks when the map has more than 40 rows or
     * columns, or when half the terminal width cannot hold it. */
    int half_blocks;
    int width;                   /* terminal columns (default 80, >= 20)  */
    const char *title;           /* first line; NULL: none                */
    const char *const *x_labels; /* [Lk] or NULL                          */
    const char *const *y_labels; /* [Lq] or NULL                          */
    double vmin, vmax;           /* as attn_heatmap_opts                  */
    const attn_mask *mask;       /* masked cells shown as "x" / grey      */
} attn_term_opts;

ATTN_API void attn_term_opts_init(attn_term_opts *opts);

/* Renders the map w[b, h] as UTF-8 text with a colour scale line into buf
 * (NUL-terminated); *len receives the length without the NUL. Maps wider
 * than the terminal are block-averaged. buf NULL with cap 0 only measures
 * (ATTN_OK, *len = length). Errors: ATTN_E_INVALID (cap too small: *len
 * still receives the length needed; NULL len), ATTN_E_SHAPE, ATTN_E_DTYPE,
 * ATTN_E_NOMEM. */
ATTN_API attn_status attn_term_render(const attn_tensor *w, int64_t b,
                                      int64_t h, const attn_term_opts *opts,
                                      char *buf, size_t cap, size_t *len);

/* --- Interactive HTML viewer ----------------------------------------- */

typedef struct {
    const char *title;           /* NULL: "attention weights: Lq x Lk
                                    tokens, N layers x H heads"           */
    const char *const *q_tokens; /* [Lq] left column, or NULL: positions   */
    const char *const *k_tokens; /* [Lk] right column, or NULL: q_tokens if
                                    Lq == Lk, else positions              */
    /* The name of w's first axis, in its picker and the default title:
     * NULL: "layer"; "batch" for the (batch, head, Lq, Lk) weights of one
     * attention. Letters, digits, spaces, '-' and '_' only. */
    const char *first_axis;
} attn_html_opts;

/* Writes one self-contained HTML file (inline CSS and JavaScript, no
 * network) showing w (layers, heads, Lq, Lk): query tokens left, key tokens
 * right, a line per pair whose opacity is the weight, hover a token to keep
 * only its lines, selectors of the first axis (opts->first_axis: layer or
 * batch entry) and the head, and the heatmap beside it.
 * Up to 1024 tokens per side. Errors: ATTN_E_INVALID, ATTN_E_SHAPE,
 * ATTN_E_DTYPE, ATTN_E_IO, ATTN_E_NOMEM. */
ATTN_API attn_status attn_html_write(const char *path, const attn_tensor *w,
                                     const attn_html_opts *opts);

/* --- Diagnostics ------------------------------------------------------ */

/* Verdict flags (combined by OR; 0 = nothing wrong seen). */
#define ATTN_VERDICT_TOO_UNIFORM 1u /* mean normalized entropy >= 0.95 */
#define ATTN_VERDICT_TOO_CONCENTRATED                                          \
    2u                                 /* mean normalized entropy <= 0.01:
                                            saturated (one-hot); a sharp
                                            map (<= 0.10) is not flagged */
#define ATTN_VERDICT_MASK_LEAK 4u      /* weight on masked keys > 0       */
#define ATTN_VERDICT_NOT_NORMALIZED 8u /* a row sum is off by > 1e-3      */
#define ATTN_VERDICT_NONFINITE 16u     /* NaN or Inf weights              */

typedef struct {
    int64_t rows;           /* query rows looked at                        */
    int64_t rows_empty;     /* rows with no visible key (expected sum 0)   */
    double row_sum_dev_max; /* max |sum_j w[i,j] - expected| (1, or 0 for
                                an empty row)                               */
    double row_sum_dev_mean;
    /* Entropy of each row over its visible keys (renormalized to their
     * mass, so leaked weight does not push it past 1), divided by
     * log(visible keys): 0 = one-hot, 1 = uniform. Rows with fewer than
     * two visible keys or no visible mass have none; entropy_rows counts
     * the others. */
    int64_t entropy_rows;
    double entropy_min, entropy_mean, entropy_max;
    double max_weight;  /* largest finite weight                       */
    double leak_total;  /* sum of |w| on masked positions              */
    double leak_max;    /* largest |w| on a masked position            */
    int64_t leak_count; /* masked positions with w != 0                */
    int64_t nan_count, inf_count;
    unsigned verdict; /* ATTN_VERDICT_* flags                        */
} attn_stats;

/* Diagnostics of w (N, H, Lq, Lk) under mask (NULL: every key visible):
 * per_head[n * H + h] for each map (per_head may be NULL) and overall for
 * all of them. Errors: ATTN_E_INVALID, ATTN_E_SHAPE, ATTN_E_DTYPE. */
ATTN_API attn_status attn_stats_compute(const attn_tensor *w,
                                        const attn_mask *mask,
                                        attn_stats *per_head,
                                        attn_stats *overall);

/* The verdict in plain words, one sentence per flag with the advice of the
 * tutorials, or "looks healthy: ..." when no flag is set. Truncates to cap
 * (always NUL-terminated); *len (if not NULL) gets the full length.
 * Errors: ATTN_E_INVALID (NULL s, NULL buf with cap > 0, flags that are
 * not ATTN_VERDICT_*). */
ATTN_API attn_status attn_stats_verdict(const attn_stats *s, char *buf,
                                        size_t cap, size_t *len);

typedef struct {
    double max_abs;  /* max |a - b|                                       */
    double mean_abs; /* mean |a - b| over the elements where both are
                         finite                                           */
    /* KL(a || b) of each row, sum_j a log(a / b) over a > 0 (natural log),
     * averaged over rows where a has mass: the distillation measure with a
     * as the teacher. A row with a > 0 where b = 0 is infinite. */
    double mean_kl;
    double max_kl;
    int64_t rows;      /* rows in the KL mean                               */
    int64_t nonfinite; /* elements where a or b is NaN or Inf (skipped)     */
} attn_compare_result;

/* Compares two weight tensors of the same shape. Errors: ATTN_E_INVALID,
 * ATTN_E_SHAPE, ATTN_E_DTYPE. */
ATTN_API attn_status attn_compare_weights(const attn_tensor *a,
                                          const attn_tensor *b,
                                          attn_compare_result *r);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_VIZ_H */

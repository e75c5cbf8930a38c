/* The 2-D geometry of a dot product: two arrows from the origin on a grid,
 * a legend, and a . b = |a| |b| cos(theta) in the title. */
#include "viz_internal.h"

#include <math.h>
#include <stdio.h>

static void arrow(cairo_t *cr, double x0, double y0, double x1, double y1,
                  const double c[3]) {
    double dx = x1 - x0, dy = y1 - y0, len = sqrt(dx * dx + dy * dy);
    cairo_set_source_rgb(cr, c[0], c[1], c[2]);
    cairo_set_line_width(cr, 3);
    if (len < 1e-9) {
        cairo_arc(cr, x0, y0, 4, 0, 2 * VIZ_PI);
        cairo_fill(cr);
        return;
    }
    double ux = dx / len, uy = dy / len, head = fmin(14, len * 0.4);
    cairo_move_to(cr, x0, y0);
    cairo_line_to(cr, x1 - ux * head * 0.8, y1 - uy * head * 0.8);
    cairo_stroke(cr);
    cairo_move_to(cr, x1, y1);
    cairo_line_to(cr, x1 - ux * head - uy * head * 0.45,
                  y1 - uy * head + ux * head * 0.45);
    cairo_line_to(cr, x1 - ux * head + uy * head * 0.45,
                  y1 - uy * head - ux * head * 0.45);
    cairo_close_path(cr);
    cairo_fill(cr);
}

attn_status attn_geometry_write(const char *path, const double a[2],
                                const double b[2], const char *a_name,
                                const char *b_name) {
    ATTN__NONNULL("path, a, b", path, a, b);
    for (int i = 0; i < 2; i++)
        if (!isfinite(a[i]) || !isfinite(b[i]) || fabs(a[i]) > 1e6 ||
            fabs(b[i]) > 1e6)
            return attn__fail(ATTN_E_INVALID,
                              "vector component %d (a %g, b %g) "
                              "is not finite or beyond 1e6",
                              i, a[i], b[i]);
    if (!a_name) a_name = "a";
    if (!b_name) b_name = "b";
    double dot = a[0] * b[0] + a[1] * b[1];
    double na = hypot(a[0], a[1]), nb = hypot(b[0], b[1]);
    char title[160], cosb[32];
    if (na > 0 && nb > 0)
        snprintf(cosb, sizeof cosb, "%.3f", dot / (na * nb));
    else
        snprintf(cosb, sizeof cosb, "n/a");
    snprintf(title, sizeof title, "%s \xc2\xb7 %s = %.3g,  cos \xce\xb8 = %s",
             a_name, b_name, dot, cosb);

    /* data range: both vectors and the origin, one unit of margin, square */
    double lo = fmin(0, fmin(fmin(a[0], b[0]), fmin(a[1], b[1])));
    double hi = fmax(0, fmax(fmax(a[0], b[0]), fmax(a[1], b[1])));
    double step = attn__viz_nice_step(hi - lo > 0 ? hi - lo : 1, 5);
    lo = floor(lo / step) * step - step;
    hi = ceil(hi / step) * step + step;
    const double side = 400, margin = 40, top = 44;
    double W = side + 2 * margin, H = side + top + margin;
    viz_doc doc;
    attn_status st = attn__viz_doc_begin(&doc, path, W, H);
    if (st != ATTN_OK) return st;
    cairo_t *cr = doc.cr;
#define PX(x) (margin + ((x)-lo) / (hi - lo) * side)
#define PY(y) (top + side - ((y)-lo) / (hi - lo) * side)
    char buf[32];
    cairo_set_line_width(cr, 1);
    for (double t = lo; t <= hi + step * 1e-9; t += step) {
        int axis = fabs(t) < step * 1e-9;
        cairo_set_source_rgb(cr, axis ? 0.3 : 0.85, axis ? 0.3 : 0.85,
                             axis ? 0.3 : 0.85);
        cairo_move_to(cr, round(PX(t)) + 0.5, PY(lo));
        cairo_line_to(cr, round(PX(t)) + 0.5, PY(hi));
        cairo_move_to(cr, PX(lo), round(PY(t)) + 0.5);
        cairo_line_to(cr, PX(hi), round(PY(t)) + 0.5);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        snprintf(buf, sizeof buf, "%g", fabs(t) < step * 1e-9 ? 0.0 : t);
        attn__viz_text(&doc, buf, PX(t), PY(lo) + 4, 10, 0, 0, 0.5, 0);
        attn__viz_text(&doc, buf, PX(lo) - 4, PY(t), 10, 0, 0, 1, 0.5);
    }
    const double ca[3] = {0.84, 0.15, 0.16}, cb[3] = {0.12, 0.35, 0.75};
    arrow(cr, PX(0), PY(0), PX(a[0]), PY(a[1]), ca);
    arrow(cr, PX(0), PY(0), PX(b[0]), PY(b[1]), cb);
    cairo_set_source_rgb(cr, 0, 0, 0);
    attn__viz_text(&doc, title, W / 2, 12, 15, 1, 0, 0.5, 0);
    /* legend in the top-left corner of the plot */
    char la[96], lb[96];
    snprintf(la, sizeof la, "%s = (%g, %g)", a_name, a[0], a[1]);
    snprintf(lb, sizeof lb, "%s = (%g, %g)", b_name, b[0], b[1]);
    attn__viz_font(cr, 12, 0);
    double lw =
        fmax(attn__viz_text_width(cr, la), attn__viz_text_width(cr, lb)) + 40;
    double lx = PX(lo) + 8, ly = PY(hi) + 8;
    cairo_set_source_rgba(cr, 1, 1, 1, 0.9);
    cairo_rectangle(cr, lx, ly, lw, 46);
    cairo_fill_preserve(cr);
    cairo_set_line_width(cr, 1);
    cairo_set_source_rgb(cr, 0.5, 0.5, 0.5);
    cairo_stroke(cr);
    for (int k = 0; k < 2; k++) {
        const double *c = k ? cb : ca;
        double y = ly + 14 + 18 * k;
        cairo_set_source_rgb(cr, c[0], c[1], c[2]);
        cairo_set_line_width(cr, 3);
        cairo_move_to(cr, lx + 8, y);
        cairo_line_to(cr, lx + 28, y);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        attn__viz_text(&doc, k ? lb : la, lx + 34, y, 12, 0, 0, 0, 0.5);
    }
#undef PX
#undef PY
    return attn__viz_doc_end(&doc);
}

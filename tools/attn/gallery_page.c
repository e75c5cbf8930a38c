/* The demo gallery's page (see cli.h): the list of pictures with their
 * sections, captions, notes and tables, and the index.html that links
 * them. The experiments that fill it are demo_gallery.c, demo_speed.c and
 * demo_train.c. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

/* ---- the gallery index ---------------------------------------------- */

void gallery_init(demo_gallery *g, const char *dir) {
    memset(g, 0, sizeof *g);
    g->dir = dir;
}

const char *gallery_path(demo_gallery *g, const char *file) {
    snprintf(g->path, sizeof g->path, "%s/%s", g->dir, file);
    return g->path;
}

void gallery_section(demo_gallery *g, const char *title) {
    if (g->nsec >= GALLERY_MAX_SECTIONS) return;
    snprintf(g->sec[g->nsec].title, sizeof g->sec[0].title, "%s", title);
    g->nsec++;
}

void gallery_add(demo_gallery *g, const char *file, const char *caption) {
    if (g->nitems >= GALLERY_MAX_ITEMS || g->nsec == 0) return;
    demo_item *it = &g->item[g->nitems++];
    snprintf(it->file, sizeof it->file, "%s", file);
    snprintf(it->caption, sizeof it->caption, "%s", caption);
    it->section = g->nsec - 1;
    printf("  picture: %s/%s\n", g->dir, file);
}

int gallery_wrote(const char *cmd, demo_gallery *g, attn_status st,
                  const char *what, const char *file, const char *caption) {
    if (st) return cli_fail(cmd, st, what);
    gallery_add(g, file, caption);
    return 0;
}

void gallery_note(demo_gallery *g, const char *text) {
    if (g->nsec == 0) return;
    snprintf(g->sec[g->nsec - 1].note, sizeof g->sec[0].note, "%s", text);
}

int gallery_table_row(demo_gallery *g, const char *cells) {
    if (g->nsec == 0) return 1;
    char *t = g->sec[g->nsec - 1].table;
    size_t used = strlen(t), need = strlen(cells) + 1;
    if (used + need >= sizeof g->sec[0].table) return 1;
    memcpy(t + used, cells, need - 1);
    t[used + need - 1] = '\n';
    t[used + need] = '\0';
    return 0;
}

/* s[0..n) as HTML text */
static void html_span(FILE *f, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '<')
            fputs("&lt;", f);
        else if (s[i] == '>')
            fputs("&gt;", f);
        else if (s[i] == '&')
            fputs("&amp;", f);
        else if (s[i] == '"')
            fputs("&quot;", f);
        else
            fputc(s[i], f);
    }
}

static void html_table(FILE *f, const char *t) {
    fputs("<table>\n", f);
    for (int row = 0; *t; row++) {
        const char *end = strchr(t, '\n');
        if (!end) end = t + strlen(t);
        fputs("<tr>", f);
        for (;;) { /* every cell, empty ones too */
            const char *c = memchr(t, '\t', (size_t)(end - t));
            if (!c) c = end;
            fputs(row ? "<td>" : "<th>", f);
            html_span(f, t, (size_t)(c - t));
            fputs(row ? "</td>" : "</th>", f);
            if (c == end) break;
            t = c + 1;
        }
        fputs("</tr>\n", f);
        t = *end ? end + 1 : end;
    }
    fputs("</table>\n", f);
}

/* Text with `code` spans (the captions quote commands) as <code>. */
static void html_text(FILE *f, const char *s) {
    for (;;) {
        const char *a = strchr(s, '`'), *b = a ? strchr(a + 1, '`') : NULL;
        if (!b) {
            html_span(f, s, strlen(s));
            return;
        }
        html_span(f, s, (size_t)(a - s));
        fputs("<code>", f);
        html_span(f, a + 1, (size_t)(b - a - 1));
        fputs("</code>", f);
        s = b + 1;
    }
}

/* A picture's width in pixels: from a PNG's IHDR or an SVG's width="..";
 * 0 if unknown. The index shows every picture at that size (no smaller
 * than it was drawn to be read), so an SVG and its PNG twin match. */
static long image_width(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char h[1024];
    size_t n = fread(h, 1, sizeof h - 1, f);
    fclose(f);
    h[n] = 0;
    if (n >= 24 && memcmp(h, "\x89PNG", 4) == 0)
        return ((long)h[16] << 24) | ((long)h[17] << 16) | ((long)h[18] << 8) |
               h[19];
    const char *w = strstr((const char *)h, "<svg");
    if (w) w = strstr(w, " width=\"");
    return w ? strtol(w + 8, NULL, 10) : 0;
}

int gallery_write_index(const char *cmd, demo_gallery *g) {
    const char *path = gallery_path(g, "index.html");
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "attn %s: cannot write %s\n", cmd, cli_esc(path));
        return 1;
    }
    fputs(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<title>attn demo: the tutorials' experiments</title>\n<style>\n"
        "body{font-family:'DejaVu Sans',sans-serif;margin:24px;max-width:1400px}\n"
        "h1{font-size:22px}h2{font-size:17px;margin-top:28px}\n"
        "figure{display:inline-block;margin:8px 16px 8px 0;vertical-align:top;"
        "max-width:100%}\n"
        /* pictures at the size they were drawn (their width attribute),
           * shrunk only to fit the window */
        "figure img{max-width:100%;height:auto;border:1px solid #ddd}\n"
        "figcaption{font-size:13px;color:#444;max-width:640px}\n"
        ".note{color:#333}\n"
        "table{border-collapse:collapse;font-size:13px;margin:8px 0}\n"
        "th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}\n"
        "th:first-child,td:first-child{text-align:left}\n"
        "</style>\n</head>\n<body>\n"
        "<h1>attn demo: the tutorials' experiments</h1>\n"
        "<p>Made by <code>attn demo</code> with fixed seeds; every picture "
        "below was drawn by libattn (cairo).</p>\n",
        f);
    for (int s = 0; s < g->nsec; s++) {
        fprintf(f, "<h2 id=\"part%d\">", atoi(g->sec[s].title));
        html_text(f, g->sec[s].title);
        fputs("</h2>\n", f);
        if (g->sec[s].note[0]) {
            fputs("<p class=\"note\">", f);
            html_text(f, g->sec[s].note);
            fputs("</p>\n", f);
        }
        if (g->sec[s].table[0]) html_table(f, g->sec[s].table);
        for (int i = 0; i < g->nitems; i++) {
            const demo_item *it = &g->item[i];
            if (it->section != s) continue;
            size_t n = strlen(it->file);
            int is_page = n > 5 && strcmp(it->file + n - 5, ".html") == 0;
            fputs("<figure>", f);
            if (is_page) {
                fprintf(f, "<a href=\"%s\">open the interactive viewer</a>",
                        it->file);
            } else {
                long w = image_width(gallery_path(g, it->file));
                fprintf(f, "<a href=\"%s\"><img src=\"%s\"", it->file,
                        it->file);
                if (w > 0) fprintf(f, " width=\"%ld\"", w);
                fputs(" alt=\"", f);
                for (const char *c = it->caption; *c; c++) /* plain: no `` */
                    if (*c != '`') html_span(f, c, 1);
                fputs("\"></a>", f);
            }
            fputs("<figcaption>", f);
            html_text(f, it->caption);
            fputs("</figcaption></figure>\n", f);
        }
    }
    fputs("</body>\n</html>\n", f);
    if (fclose(f) != 0) {
        fprintf(stderr, "attn %s: writing %s failed\n", cmd, cli_esc(path));
        return 1;
    }
    return 0;
}

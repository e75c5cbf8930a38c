/* Terminal printing of small matrices and masks, shared by demo and the
 * subcommands that show their results. */
#include "cli.h"

/* The title "T (rows x cols<note>)" and the rows: the numbers m[i * ld + j]
 * in width columns with decimals digits between brackets, or with mask
 * (m NULL) a 1 or a dot per entry. */
static void print_rows(FILE *f, const char *title, const char *note,
                       const float *m, const uint8_t *mask, int64_t rows,
                       int64_t cols, int64_t ld, int width, int decimals) {
    if (title)
        fprintf(f, "%s (%lld x %lld%s)\n", title, (long long)rows,
                (long long)cols, note);
    for (int64_t i = 0; i < rows; i++) {
        fprintf(f, mask ? "  " : "  [");
        for (int64_t j = 0; j < cols; j++)
            if (mask)
                fprintf(f, "%s%c", j ? " " : "", mask[i * ld + j] ? '1' : '.');
            else
                fprintf(f, "%s%*.*f", j ? "  " : "", width, decimals,
                        (double)m[i * ld + j]);
        fprintf(f, mask ? "\n" : "]\n");
    }
}

void cli_print_matrix(FILE *f, const char *title, const float *m, int64_t rows,
                      int64_t cols, int64_t ld, int decimals) {
    /* one width for every column: the widest printed entry */
    int width = 1;
    char cell[64];
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            int n = snprintf(cell, sizeof cell, "%.*f", decimals,
                             (double)m[i * ld + j]);
            if (n > width) width = n;
        }
    print_rows(f, title, "", m, NULL, rows, cols, ld, width, decimals);
}

void cli_print_mask(FILE *f, const char *title, const uint8_t *m, int64_t rows,
                    int64_t cols, int64_t ld) {
    print_rows(f, title, ", 1 = attends", NULL, m, rows, cols, ld, 0, 0);
}

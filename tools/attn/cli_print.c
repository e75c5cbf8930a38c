/* Terminal printing of small matrices and masks, shared by demo and the
 * subcommands that show their results. */
#include "cli.h"

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
    if (title)
        fprintf(f, "%s (%lld x %lld)\n", title, (long long)rows,
                (long long)cols);
    for (int64_t i = 0; i < rows; i++) {
        fprintf(f, "  [");
        for (int64_t j = 0; j < cols; j++)
            fprintf(f, "%s%*.*f", j ? "  " : "", width, decimals,
                    (double)m[i * ld + j]);
        fprintf(f, "]\n");
    }
}

void cli_print_mask(FILE *f, const char *title, const uint8_t *m, int64_t rows,
                    int64_t cols, int64_t ld) {
    if (title)
        fprintf(f, "%s (%lld x %lld, 1 = attends)\n", title, (long long)rows,
                (long long)cols);
    for (int64_t i = 0; i < rows; i++) {
        fprintf(f, "  ");
        for (int64_t j = 0; j < cols; j++)
            fprintf(f, "%s%c", j ? " " : "", m[i * ld + j] ? '1' : '.');
        fprintf(f, "\n");
    }
}

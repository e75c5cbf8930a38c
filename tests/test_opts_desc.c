/* The one description of the attention options (src/core/opts_desc.c)
 * covers every field of attn_sdpa_opts: each byte belongs to a row's
 * field, or is padding (a gap shorter than 8 bytes before an 8-aligned
 * field), so a field added to attn_mask or attn_sdpa_opts without a row
 * fails here. Rows are well formed (a name, a type, help, and for each
 * side the command or Python lacks, the reason). With --list it prints
 * "name<TAB>flag<TAB>keyword" per row for opts_desc_sides.py, which
 * checks that the command and Python take what the rows give them. */
#include "attn.h"
#include "check.h"
#include "opts_desc.h"

#include <stdio.h>
#include <string.h>

static void list(void) {
    int n;
    const attn__opt_desc *rows = attn__sdpa_opt_descs(&n);
    for (int r = 0; r < n; r++) {
        size_t fl = rows[r].cli ? strcspn(rows[r].cli, " ") : 0;
        printf("%s\t%.*s\t%s\n", rows[r].name, (int)fl,
               rows[r].cli ? rows[r].cli : "",
               rows[r].python ? rows[r].python : "");
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        list();
        return 0;
    }
    int n;
    const attn__opt_desc *rows = attn__sdpa_opt_descs(&n);
    unsigned char seen[sizeof(attn_sdpa_opts)];
    memset(seen, 0, sizeof seen);
    for (int r = 0; r < n; r++) {
        const attn__opt_desc *d = &rows[r];
        CHECK_MSG(d->name && d->type && d->help && *d->help, "row %d", r);
        CHECK_MSG((d->cli && d->python) || (d->none && *d->none),
                  "%s: a side without the option needs its reason", d->name);
        CHECK_MSG(!d->cli || strncmp(d->cli, "--", 2) == 0, "%s: flag %s",
                  d->name, d->cli);
        /* a plain value has a rule for its error and a field of its
         * type (an enum without a field hands its word on) */
        const attn__opt_value *v = &d->value;
        const size_t want[] = {
            0, sizeof(double), 0, sizeof(uint64_t), sizeof(int), 0};
        CHECK_MSG(v->kind == ATTN__VAL_OWN || v->kind == ATTN__VAL_FILE ||
                      (d->cli && v->rule && *v->rule),
                  "%s: a plain value needs a flag and a rule", d->name);
        CHECK_MSG(!want[v->kind] || d->fields[0].size == want[v->kind] ||
                      (v->kind == ATTN__VAL_ENUM && !d->fields[0].size),
                  "%s: value kind %d into a field of %zu bytes", d->name,
                  (int)v->kind, d->fields[0].size);
        CHECK_MSG(v->kind != ATTN__VAL_INT ||
                      d->fields[0].size == sizeof(int) ||
                      d->fields[0].size == sizeof(int64_t),
                  "%s: an integer into %zu bytes", d->name, d->fields[0].size);
        if (v->kind == ATTN__VAL_ENUM) {
            int words = 1;
            for (const char *c = v->words; c && *c; c++) words += *c == '|';
            CHECK_MSG(v->words && words <= 6, "%s: %d words (6 at most)",
                      d->name, words);
        }
        for (int k = 0; k < 5 && d->fields[k].size; k++) {
            const attn__opt_field *f = &d->fields[k];
            CHECK_MSG(f->off + f->size <= sizeof seen, "%s: field %d", d->name,
                      k);
            if (f->off + f->size <= sizeof seen)
                memset(seen + f->off, 1, f->size);
        }
    }
    /* every byte not in a field is padding */
    size_t i = 0;
    while (i < sizeof seen) {
        if (seen[i]) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < sizeof seen && !seen[j]) j++;
        CHECK_MSG(j - i < 8 && (j % 8 == 0 || j == sizeof seen),
                  "attn_sdpa_opts bytes %zu .. %zu belong to no option row "
                  "of src/core/opts_desc.c",
                  i, j - 1);
        i = j;
    }
    return check_done("test_opts_desc");
}

/* Seeded generators of the toy tasks (reverse, copy, sort, add) and their
 * answers. Layouts are documented in attn.h ("Tasks"). */
#include "attn_train.h"
#include "internal.h"

#include <string.h>

#define TASK_MAX_LEN 4096      /* longer sequences are not toy tasks       */
#define TASK_MAX_VOCAB 1000000 /* symbols of reverse/copy/sort             */

void attn_task_init(attn_task *t, attn_task_kind kind) {
    if (!t) return;
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->vocab = 10;
    t->min_len = t->max_len = kind == ATTN_TASK_ADD ? 3 : 16;
}

static const char *const task_names[ATTN_TASK_COUNT] = {"reverse", "copy",
                                                        "sort", "add"};

const char *attn_task_name(attn_task_kind kind) {
    return (unsigned)kind < ATTN_TASK_COUNT ? task_names[kind] : "?";
}

attn_status attn_task_parse(const char *name, attn_task_kind *kind) {
    ATTN__NONNULL("name, kind", name, kind);
    const int i = attn__name_index(task_names, ATTN_TASK_COUNT, name);
    if (i >= 0) {
        *kind = (attn_task_kind)i;
        return ATTN_OK;
    }
    return attn__fail(ATTN_E_INVALID,
                      "unknown task '%s' (tasks: reverse, "
                      "copy, sort, add)",
                      name);
}

attn_status attn_task_check(const attn_task *t) {
    if (!t) return attn__fail(ATTN_E_INVALID, "task is NULL");
    if ((unsigned)t->kind >= ATTN_TASK_COUNT)
        return attn__fail(ATTN_E_INVALID, "task kind is %d: not a task",
                          (int)t->kind);
    if (t->kind == ATTN_TASK_ADD ? (t->vocab < 2 || t->vocab > 36)
                                 : (t->vocab < 2 || t->vocab > TASK_MAX_VOCAB))
        return attn__fail(ATTN_E_INVALID,
                          "task %s has vocab %lld; it must be "
                          "in [2, %d]",
                          attn_task_name(t->kind), (long long)t->vocab,
                          t->kind == ATTN_TASK_ADD ? 36 : TASK_MAX_VOCAB);
    const int64_t cap =
        t->kind == ATTN_TASK_ADD ? (TASK_MAX_LEN - 1) / 2 : TASK_MAX_LEN;
    if (t->min_len < 1 || t->max_len < t->min_len || t->max_len > cap)
        return attn__fail(ATTN_E_INVALID,
                          "task %s has lengths %lld..%lld; "
                          "they must satisfy 1 <= min <= max <= %lld",
                          attn_task_name(t->kind), (long long)t->min_len,
                          (long long)t->max_len, (long long)cap);
    return ATTN_OK;
}

int64_t attn_task_seq_len(const attn_task *t) {
    if (attn_task_check(t)) return 0;
    return t->kind == ATTN_TASK_ADD ? 2 * t->max_len + 1 : t->max_len;
}

int64_t attn_task_vocab_in(const attn_task *t) {
    return attn_task_check(t) ? 0 : t->vocab + 2;
}

int64_t attn_task_vocab_out(const attn_task *t) {
    return attn_task_check(t) ? 0 : t->vocab;
}

/* Counting sort of n symbols < vocab into out: sort needs no comparisons
 * and is stable by construction. Small vocabularies (the tasks) count in a
 * stack table; large ones fall back to insertion order by value. */
static void sort_symbols(const int32_t *x, int64_t n, int64_t vocab,
                         int32_t *out) {
    if (vocab <= 256) {
        int64_t count[256] = {0};
        for (int64_t i = 0; i < n; i++) count[x[i]]++;
        int64_t k = 0;
        for (int64_t s = 0; s < vocab; s++)
            for (int64_t c = 0; c < count[s]; c++) out[k++] = (int32_t)s;
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        int32_t v = x[i];
        int64_t j = i;
        while (j > 0 && out[j - 1] > v) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = v;
    }
}

/* Targets of one sequence of n tokens (valid input assumed). */
static void answer(const attn_task *t, const int32_t *x, int64_t n,
                   int32_t *y) {
    switch (t->kind) {
    case ATTN_TASK_REVERSE:
        for (int64_t i = 0; i < n; i++) y[i] = x[n - 1 - i];
        break;
    case ATTN_TASK_COPY: memcpy(y, x, (size_t)n * sizeof *y); break;
    case ATTN_TASK_SORT: sort_symbols(x, n, t->vocab, y); break;
    case ATTN_TASK_ADD: {
        const int64_t d = (n - 1) / 2; /* digits per operand */
        int32_t carry = 0;
        for (int64_t i = 0; i < d; i++) {
            int32_t s = x[i] + x[d + 1 + i] + carry;
            carry = s >= t->vocab;
            y[i] = s - (carry ? (int32_t)t->vocab : 0);
        }
        y[d] = carry;
        for (int64_t i = d + 1; i < n; i++) y[i] = ATTN_IGNORE_INDEX;
        break;
    }
    }
}

attn_status attn_task_batch(const attn_task *t, attn_rng *rng, int64_t B,
                            int32_t *tokens, int32_t *targets,
                            int64_t *lengths) {
    attn_status st = attn_task_check(t);
    if (st) return st;
    ATTN__NONNULL("rng, tokens, targets, lengths", rng, tokens, targets,
                  lengths);
    if (B < 1)
        return attn__fail(ATTN_E_SHAPE, "batch is %lld (< 1)", (long long)B);
    const int64_t L = attn_task_seq_len(t);
    int64_t BL;
    if (!attn__mul_i64(B, L, &BL) || (uint64_t)BL > SIZE_MAX / 4)
        return attn__fail(ATTN_E_NOMEM, "batch %lld x length %lld overflows",
                          (long long)B, (long long)L);
    const int32_t pad = (int32_t)t->vocab;
    const uint64_t span = (uint64_t)(t->max_len - t->min_len + 1);
    for (int64_t b = 0; b < B; b++) {
        int32_t *x = tokens + b * L, *y = targets + b * L;
        const int64_t m = t->min_len + (int64_t)attn_rng_below(rng, span);
        int64_t n;
        if (t->kind == ATTN_TASK_ADD) {
            n = 2 * m + 1;
            for (int64_t i = 0; i < m; i++) {
                x[i] = (int32_t)attn_rng_below(rng, (uint64_t)t->vocab);
                x[m + 1 + i] = (int32_t)attn_rng_below(rng, (uint64_t)t->vocab);
            }
            x[m] = pad + 1;
        } else {
            n = m;
            for (int64_t i = 0; i < n; i++)
                x[i] = (int32_t)attn_rng_below(rng, (uint64_t)t->vocab);
        }
        answer(t, x, n, y);
        for (int64_t i = n; i < L; i++) {
            x[i] = pad;
            y[i] = ATTN_IGNORE_INDEX;
        }
        lengths[b] = n;
    }
    return ATTN_OK;
}

attn_status attn_task_solve(const attn_task *t, const int32_t *tokens,
                            int64_t n, int32_t *targets) {
    attn_status st = attn_task_check(t);
    if (st) return st;
    if (!tokens || !targets)
        return attn__fail(ATTN_E_INVALID, "%s is NULL",
                          tokens ? "targets" : "tokens");
    const int64_t L = attn_task_seq_len(t);
    if (n < 1 || n > L)
        return attn__fail(ATTN_E_SHAPE,
                          "the input has %lld tokens; task %s "
                          "takes 1 to %lld",
                          (long long)n, attn_task_name(t->kind), (long long)L);
    const int32_t sep = (int32_t)t->vocab + 1;
    if (t->kind == ATTN_TASK_ADD) {
        const int64_t d = (n - 1) / 2;
        if (n % 2 == 0 || d < 1 || tokens[d] != sep)
            return attn__fail(ATTN_E_INVALID,
                              "an add input is n digits, '+', "
                              "n digits (least significant first); got %lld "
                              "tokens with %s in the middle",
                              (long long)n,
                              n % 2 == 0         ? "no single token"
                              : tokens[d] == sep ? "'+'"
                                                 : "no '+'");
        for (int64_t i = 0; i < n; i++)
            if (i != d && (tokens[i] < 0 || tokens[i] >= t->vocab))
                return attn__fail(ATTN_E_INVALID,
                                  "add token %lld is %d; "
                                  "digits are 0..%lld",
                                  (long long)i, tokens[i],
                                  (long long)t->vocab - 1);
    } else {
        for (int64_t i = 0; i < n; i++)
            if (tokens[i] < 0 || tokens[i] >= t->vocab)
                return attn__fail(ATTN_E_INVALID,
                                  "token %lld is %d; task %s "
                                  "takes symbols 0..%lld",
                                  (long long)i, tokens[i],
                                  attn_task_name(t->kind),
                                  (long long)t->vocab - 1);
    }
    answer(t, tokens, n, targets);
    return ATTN_OK;
}

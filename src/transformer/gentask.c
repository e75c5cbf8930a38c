/* Seeded generators of the generation tasks (date normalization, reverse,
 * sort, add as string pairs), their character vocabularies, and the ids
 * of training batches for encoder-decoder and decoder-only models. Layouts
 * are documented in attn_transformer.h ("Generation tasks"). */
#include "internal.h"
#include "attn_transformer.h"

#include <ctype.h>
#include <stdarg.h>
#include <string.h>

#define GEN_MAX_DIGITS 64 /* longest reverse/sort input, add operand */
#define DATE_MAX_SRC 29   /* "wednesday, september 30, 2026"         */
#define DATE_TGT 10       /* "2026-03-03"                            */

static const char *const names[ATTN_GEN_COUNT] = {"date", "reverse", "sort",
                                                  "add"};

void attn_gen_task_init(attn_gen_task *t, attn_gen_kind kind) {
    if (!t) return;
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->min_len = 1;
    t->max_len = kind == ATTN_GEN_ADD ? 3 : 10;
}

const char *attn_gen_task_name(attn_gen_kind kind) {
    return (unsigned)kind < ATTN_GEN_COUNT ? names[kind] : "?";
}

attn_status attn_gen_task_parse(const char *name, attn_gen_kind *kind) {
    ATTN__NONNULL("name, kind", name, kind);
    const int i = attn__name_index(names, ATTN_GEN_COUNT, name);
    if (i >= 0) {
        *kind = (attn_gen_kind)i;
        return ATTN_OK;
    }
    return attn__fail(ATTN_E_INVALID,
                      "unknown generation task '%.40s' "
                      "(tasks: date, reverse, sort, add)",
                      name);
}

attn_status attn_gen_task_check(const attn_gen_task *t) {
    if (!t) return attn__fail(ATTN_E_INVALID, "task is NULL");
    if ((unsigned)t->kind >= ATTN_GEN_COUNT)
        return attn__fail(ATTN_E_INVALID, "generation task kind is %d",
                          (int)t->kind);
    if (t->kind != ATTN_GEN_DATE &&
        (t->min_len < 1 || t->max_len < t->min_len ||
         t->max_len > GEN_MAX_DIGITS))
        return attn__fail(ATTN_E_INVALID,
                          "task %s: lengths %lld..%lld must "
                          "satisfy 1 <= min_len <= max_len <= %d",
                          names[t->kind], (long long)t->min_len,
                          (long long)t->max_len, GEN_MAX_DIGITS);
    return ATTN_OK;
}

static const char *const charsets[ATTN_GEN_COUNT][3] = {
    {" ,./-0123456789abcdefghijklmnopqrstuvwxyz", "-0123456789",
     " ,./-0123456789abcdefghijklmnopqrstuvwxyz"},
    {"0123456789", "0123456789", "0123456789"},
    {"0123456789", "0123456789", "0123456789"},
    {"+0123456789", "0123456789", "+0123456789"},
};

const char *attn_gen_charset(const attn_gen_task *t, attn_gen_side side) {
    if (!t || (unsigned)t->kind >= ATTN_GEN_COUNT || (unsigned)side > 2)
        return "";
    return charsets[t->kind][side];
}

int64_t attn_gen_vocab(const attn_gen_task *t, attn_gen_side side) {
    const char *c = attn_gen_charset(t, side);
    return *c ? ATTN_GEN_FIRST + (int64_t)strlen(c) : 0;
}

int64_t attn_gen_max_chars(const attn_gen_task *t, attn_gen_side side) {
    if (attn_gen_task_check(t)) return 0;
    const int64_t n = t->max_len;
    switch (t->kind) {
    case ATTN_GEN_DATE:
        return side == ATTN_SIDE_TARGET ? DATE_TGT : DATE_MAX_SRC;
    case ATTN_GEN_ADD: return side == ATTN_SIDE_TARGET ? n + 1 : 2 * n + 1;
    default: return n;
    }
}

/* ---- dates ------------------------------------------------------------ */

/* Days since 1970-01-01 of a proleptic Gregorian date, and back (the
 * era-based civil calendar algorithm). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const int64_t yoe = y - era * 400;
    const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int *y, int *m, int *d) {
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const int64_t doe = z - era * 146097;
    const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = (int)(yoe + era * 400 + (*m <= 2));
}

static const char *const months[12] = {
    "january", "february", "march",     "april",   "may",      "june",
    "july",    "august",   "september", "october", "november", "december"};
static const char *const weekdays[7] = {"sunday",    "monday",   "tuesday",
                                        "wednesday", "thursday", "friday",
                                        "saturday"};

static const char *ordinal(int d) {
    if (d >= 11 && d <= 13) return "th";
    return d % 10 == 1 ? "st" : d % 10 == 2 ? "nd" : d % 10 == 3 ? "rd" : "th";
}

/* A source under construction: text with the field of each character. */
typedef struct {
    char *s;
    uint8_t *field; /* or NULL */
    size_t n, cap;
} piece_buf;

static void put(piece_buf *b, int field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void put(piece_buf *b, int field, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    for (const char *p = tmp; *p && b->n + 1 < b->cap; p++, b->n++) {
        b->s[b->n] = *p;
        if (b->field) b->field[b->n] = (uint8_t)field;
    }
    b->s[b->n] = 0;
}

enum { F_NONE = 0, F_YEAR = 1, F_MONTH = 2, F_DAY = 3 };

/* The date formats: text as it stands, and %x a field: %w / %W the
 * weekday's first three letters / name, %d / %D the day (/ two digits),
 * %m / %M the month's number (/ two digits), %n / %N its name (/ first
 * three letters), %y / %Y / %Z the year's last two digits / number / four
 * digits, %o the day's ordinal suffix. */
static const char *const date_formats[] = {
    "%w %d %n %Y", "%D/%M/%y", "%n %d, %Y", "%d.%m.%Y",
    "%Z-%M-%D",    "%d %N %Y", "%N %d %Y",  "%W, %n %d, %Y",
    "%D/%M/%Z",    "%d %n %y", "%Z%M%D",    "the %d%o of %n %Y"};

/* One date in format f (0 .. ATTN_DATE_FORMATS - 1; the last for any
 * beyond the table). */
static void date_write(int f, int y, int m, int d, int wd, piece_buf *b) {
    const int nf = (int)(sizeof date_formats / sizeof date_formats[0]);
    for (const char *p = date_formats[f < nf ? f : nf - 1]; *p; p++) {
        if (*p != '%') {
            put(b, F_NONE, "%c", *p);
            continue;
        }
        switch (*++p) {
        case 'w': put(b, F_NONE, "%.3s", weekdays[wd]); break;
        case 'W': put(b, F_NONE, "%s", weekdays[wd]); break;
        case 'o': put(b, F_NONE, "%s", ordinal(d)); break;
        case 'd': put(b, F_DAY, "%d", d); break;
        case 'D': put(b, F_DAY, "%02d", d); break;
        case 'm': put(b, F_MONTH, "%d", m); break;
        case 'M': put(b, F_MONTH, "%02d", m); break;
        case 'n': put(b, F_MONTH, "%s", months[m - 1]); break;
        case 'N': put(b, F_MONTH, "%.3s", months[m - 1]); break;
        case 'y': put(b, F_YEAR, "%02d", y % 100); break;
        case 'Y': put(b, F_YEAR, "%d", y); break;
        default: put(b, F_YEAR, "%04d", y); /* %Z */
        }
    }
}

static void sample_date(attn_rng *rng, char *src, size_t sc, char *tgt,
                        size_t tc, uint8_t *sf, uint8_t *tf) {
    const int64_t lo = days_from_civil(1950, 1, 1);
    const int64_t hi = days_from_civil(2049, 12, 31);
    const int64_t z =
        lo + (int64_t)attn_rng_below(rng, (uint64_t)(hi - lo + 1));
    int y, m, d;
    civil_from_days(z, &y, &m, &d);
    const int wd = (int)(((z % 7) + 11) % 7); /* 1970-01-01 was a Thursday */
    const int f = (int)attn_rng_below(rng, ATTN_DATE_FORMATS);
    piece_buf b = {src, sf, 0, sc};
    src[0] = 0;
    date_write(f, y, m, d, wd, &b);
    snprintf(tgt, tc, "%04d-%02d-%02d", y, m, d);
    if (tf) {
        static const uint8_t iso[10] = {1, 1, 1, 1, 0, 2, 2, 0, 3, 3};
        memcpy(tf, iso, sizeof iso);
    }
}

/* ---- digits ----------------------------------------------------------- */

static int cmp_char(const void *a, const void *b) {
    return *(const char *)a - *(const char *)b;
}

/* Adds two decimal strings (no sign) into out. */
static void add_strings(const char *a, const char *b, char *out, size_t cap) {
    char r[GEN_MAX_DIGITS + 2];
    int la = (int)strlen(a), lb = (int)strlen(b), n = 0, carry = 0;
    for (int i = 0; i < la || i < lb || carry; i++) {
        int s = carry + (i < la ? a[la - 1 - i] - '0' : 0) +
                (i < lb ? b[lb - 1 - i] - '0' : 0);
        r[n++] = (char)('0' + s % 10);
        carry = s / 10;
    }
    for (int i = 0; i < n && (size_t)i + 1 < cap; i++) out[i] = r[n - 1 - i];
    out[(size_t)n < cap ? (size_t)n : cap - 1] = 0;
}

/* A number of n digits without leading zeros (n = 1: 0..9). */
static void random_number(attn_rng *rng, int64_t n, char *s) {
    for (int64_t i = 0; i < n; i++)
        s[i] = (char)('0' + (i == 0 && n > 1 ? 1 + attn_rng_below(rng, 9)
                                             : attn_rng_below(rng, 10)));
    s[n] = 0;
}

attn_status attn_gen_sample(const attn_gen_task *t, attn_rng *rng, char *src,
                            size_t src_cap, char *tgt, size_t tgt_cap) {
    return attn_gen_sample_fields(t, rng, src, src_cap, tgt, tgt_cap, NULL,
                                  NULL);
}

attn_status attn_gen_sample_fields(const attn_gen_task *t, attn_rng *rng,
                                   char *src, size_t src_cap, char *tgt,
                                   size_t tgt_cap, uint8_t *src_fields,
                                   uint8_t *tgt_fields) {
    attn_status st = attn_gen_task_check(t);
    if (st) return st;
    ATTN__NONNULL("rng, src, tgt", rng, src, tgt);
    const int64_t ms = attn_gen_max_chars(t, ATTN_SIDE_SOURCE);
    const int64_t mt = attn_gen_max_chars(t, ATTN_SIDE_TARGET);
    if (src_cap < (size_t)ms + 1 || tgt_cap < (size_t)mt + 1)
        return attn__fail(ATTN_E_INVALID,
                          "buffers of %zu and %zu bytes; task "
                          "%s needs %lld and %lld",
                          src_cap, tgt_cap, names[t->kind], (long long)ms + 1,
                          (long long)mt + 1);
    if (t->kind == ATTN_GEN_DATE) {
        sample_date(rng, src, src_cap, tgt, tgt_cap, src_fields, tgt_fields);
        return ATTN_OK;
    }
    if (src_fields) memset(src_fields, 0, (size_t)ms);
    if (tgt_fields) memset(tgt_fields, 0, (size_t)mt);
    const int64_t n =
        t->min_len +
        (int64_t)attn_rng_below(rng, (uint64_t)(t->max_len - t->min_len + 1));
    if (t->kind == ATTN_GEN_ADD) {
        char a[GEN_MAX_DIGITS + 1], b[GEN_MAX_DIGITS + 1];
        const int64_t m =
            t->min_len + (int64_t)attn_rng_below(
                             rng, (uint64_t)(t->max_len - t->min_len + 1));
        random_number(rng, n, a);
        random_number(rng, m, b);
        snprintf(src, src_cap, "%s+%s", a, b);
        add_strings(a, b, tgt, tgt_cap);
        return ATTN_OK;
    }
    for (int64_t i = 0; i < n; i++)
        src[i] = (char)('0' + attn_rng_below(rng, 10));
    src[n] = 0;
    for (int64_t i = 0; i < n; i++)
        tgt[i] = t->kind == ATTN_GEN_REVERSE ? src[n - 1 - i] : src[i];
    tgt[n] = 0;
    if (t->kind == ATTN_GEN_SORT) qsort(tgt, (size_t)n, 1, cmp_char);
    return ATTN_OK;
}

/* ---- ids -------------------------------------------------------------- */

attn_status attn_gen_encode(const attn_gen_task *t, attn_gen_side side,
                            const char *text, int32_t *ids, int64_t cap,
                            int64_t *n) {
    attn_status st = attn_gen_task_check(t);
    if (st) return st;
    ATTN__NONNULL("text, ids, n", text, ids, n);
    if ((unsigned)side > 2)
        return attn__fail(ATTN_E_INVALID, "side is %d", (int)side);
    const char *cs = charsets[t->kind][side];
    int64_t k = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++, k++) {
        const int c = *p < 128 ? tolower(*p) : *p;
        const char *at = c ? strchr(cs, c) : NULL;
        if (!at) {
            char shown[8];
            if (isprint(*p) && *p < 128)
                snprintf(shown, sizeof shown, "'%c'", *p);
            else
                snprintf(shown, sizeof shown, "\\x%02x", *p);
            return attn__fail(ATTN_E_INVALID,
                              "character %s at position %lld "
                              "is not in the %s vocabulary of task %s (\"%s\")",
                              shown, (long long)k,
                              side == ATTN_SIDE_TARGET ? "target" : "source",
                              names[t->kind], cs);
        }
        if (k >= cap)
            return attn__fail(ATTN_E_SHAPE,
                              "the text has more than %lld "
                              "characters, the most this model takes",
                              (long long)cap);
        ids[k] = (int32_t)(ATTN_GEN_FIRST + (at - cs));
    }
    *n = k;
    return ATTN_OK;
}

attn_status attn_gen_decode(const attn_gen_task *t, attn_gen_side side,
                            const int32_t *ids, int64_t n, char *text,
                            size_t cap) {
    attn_status st = attn_gen_task_check(t);
    if (st) return st;
    if (!ids || !text || cap < 1)
        return attn__fail(ATTN_E_INVALID, "%s",
                          !ids    ? "ids is NULL"
                          : !text ? "text is NULL"
                                  : "cap is 0");
    if ((unsigned)side > 2)
        return attn__fail(ATTN_E_INVALID, "side is %d", (int)side);
    const char *cs = charsets[t->kind][side];
    const int64_t nc = (int64_t)strlen(cs);
    size_t k = 0;
    for (int64_t i = 0; i < n && ids[i] != ATTN_GEN_EOS && k + 1 < cap; i++) {
        if (ids[i] == ATTN_GEN_SEP)
            text[k++] = '=';
        else if (ids[i] >= ATTN_GEN_FIRST && ids[i] < ATTN_GEN_FIRST + nc)
            text[k++] = cs[ids[i] - ATTN_GEN_FIRST];
    }
    text[k] = 0;
    return ATTN_OK;
}

attn_status attn_gen_model_fit(const attn_gen_task *t,
                               attn_transformer_config *m) {
    attn_status st = attn_gen_task_check(t);
    if (st) return st;
    if (!m) return attn__fail(ATTN_E_INVALID, "model is NULL");
    const int64_t S = attn_gen_max_chars(t, ATTN_SIDE_SOURCE);
    const int64_t T = attn_gen_max_chars(t, ATTN_SIDE_TARGET);
    if (m->kind == ATTN_MODEL_ENCDEC) {
        m->vocab_src = attn_gen_vocab(t, ATTN_SIDE_SOURCE);
        m->vocab_tgt = attn_gen_vocab(t, ATTN_SIDE_TARGET);
        m->max_src = S;
        m->max_tgt = T + 1;
    } else {
        m->vocab_src = 0;
        m->vocab_tgt = attn_gen_vocab(t, ATTN_SIDE_JOINT);
        m->max_src = 0;
        m->max_tgt = S + T + 2;
    }
    return ATTN_OK;
}

attn_status attn_gen_batch_dims(const attn_gen_task *t, attn_model_kind kind,
                                int64_t *Ls, int64_t *Lt) {
    attn_status st = attn_gen_task_check(t);
    if (st) return st;
    if (!Ls || !Lt)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", Ls ? "Lt" : "Ls");
    const int64_t S = attn_gen_max_chars(t, ATTN_SIDE_SOURCE);
    const int64_t T = attn_gen_max_chars(t, ATTN_SIDE_TARGET);
    *Ls = kind == ATTN_MODEL_ENCDEC ? S : S + 2;
    *Lt = kind == ATTN_MODEL_ENCDEC ? T + 1 : S + T + 2;
    return ATTN_OK;
}

attn_status attn_gen_input(const attn_gen_task *t, attn_model_kind kind,
                           const char *text, int32_t *ids, int64_t cap,
                           int64_t *n) {
    attn_status st = attn_gen_task_check(t);
    if (st) return st;
    ATTN__NONNULL("text, ids, n", text, ids, n);
    const int64_t S = attn_gen_max_chars(t, ATTN_SIDE_SOURCE);
    char buf[256];
    size_t len = strlen(text);
    if (kind == ATTN_MODEL_DECODER && len > 0 && text[len - 1] == '=') len--;
    if (len > (size_t)S)
        return attn__fail(ATTN_E_SHAPE,
                          "the input has %zu characters; this %s "
                          "model of task %s takes at most %lld",
                          len, attn_model_kind_name(kind), names[t->kind],
                          (long long)S);
    memcpy(buf, text, len);
    buf[len] = 0;
    const int dec = kind == ATTN_MODEL_DECODER;
    if (cap < S + 2 * dec)
        return attn__fail(ATTN_E_INVALID,
                          "cap %lld is below the %lld ids an "
                          "input may take",
                          (long long)cap, (long long)S + 2 * dec);
    int64_t k;
    st = attn_gen_encode(t, dec ? ATTN_SIDE_JOINT : ATTN_SIDE_SOURCE, buf,
                         ids + dec, S, &k);
    if (st) return st;
    if (k == 0) return attn__fail(ATTN_E_SHAPE, "the input is empty");
    if (dec) {
        ids[0] = ATTN_GEN_BOS;
        ids[k + 1] = ATTN_GEN_SEP;
        k += 2;
    }
    *n = k;
    return ATTN_OK;
}

attn_status attn_gen_batch(const attn_gen_task *t, attn_model_kind kind,
                           attn_rng *rng, int64_t B, int32_t *src,
                           int64_t *src_lengths, int32_t *tgt_in,
                           int32_t *targets, char *answers, size_t answer_cap) {
    int64_t Ls, Lt;
    attn_status st = attn_gen_batch_dims(t, kind, &Ls, &Lt);
    if (st) return st;
    if (!rng || !src || !src_lengths || !tgt_in || !targets || B < 1)
        return attn__fail(ATTN_E_INVALID,
                          "rng, src, src_lengths, tgt_in and "
                          "targets must not be NULL and B (%lld) >= 1",
                          (long long)B);
    const int64_t T = attn_gen_max_chars(t, ATTN_SIDE_TARGET);
    if (answers && answer_cap < (size_t)T + 1)
        return attn__fail(ATTN_E_INVALID, "answer_cap %zu is below %lld",
                          answer_cap, (long long)T + 1);
    const int dec = kind == ATTN_MODEL_DECODER;
    const attn_gen_side ss = dec ? ATTN_SIDE_JOINT : ATTN_SIDE_SOURCE;
    const attn_gen_side ts = dec ? ATTN_SIDE_JOINT : ATTN_SIDE_TARGET;
    for (int64_t b = 0; b < B; b++) {
        char s[128], y[128];
        int32_t xi[128], yi[128];
        int64_t ns, ny;
        if ((st = attn_gen_sample(t, rng, s, sizeof s, y, sizeof y)) ||
            (st = attn_gen_encode(t, ss, s, xi, 128, &ns)) ||
            (st = attn_gen_encode(t, ts, y, yi, 128, &ny)))
            return st;
        ATTN_ASSERT(ns <= Ls - 2 * dec && ny <= T);
        if (answers) snprintf(answers + b * answer_cap, answer_cap, "%s", y);
        int32_t *sr = src + b * Ls, *ti = tgt_in + b * Lt,
                *tg = targets + b * Lt;
        for (int64_t i = 0; i < Ls; i++) sr[i] = ATTN_GEN_PAD;
        for (int64_t i = 0; i < Lt; i++) {
            ti[i] = ATTN_GEN_PAD;
            tg[i] = ATTN_IGNORE_INDEX;
        }
        if (!dec) {
            memcpy(sr, xi, sizeof(int32_t) * (size_t)ns);
            src_lengths[b] = ns;
            ti[0] = ATTN_GEN_BOS;
            memcpy(ti + 1, yi, sizeof(int32_t) * (size_t)ny);
            memcpy(tg, yi, sizeof(int32_t) * (size_t)ny);
            tg[ny] = ATTN_GEN_EOS;
        } else {
            sr[0] = ATTN_GEN_BOS;
            memcpy(sr + 1, xi, sizeof(int32_t) * (size_t)ns);
            sr[ns + 1] = ATTN_GEN_SEP;
            src_lengths[b] = ns + 2;
            memcpy(ti, sr, sizeof(int32_t) * (size_t)(ns + 2));
            memcpy(ti + ns + 2, yi, sizeof(int32_t) * (size_t)ny);
            /* position ns + 1 (the SEP) predicts y_0, ..., the last y
             * predicts EOS */
            memcpy(tg + ns + 1, yi, sizeof(int32_t) * (size_t)ny);
            tg[ns + 1 + ny] = ATTN_GEN_EOS;
        }
    }
    return ATTN_OK;
}

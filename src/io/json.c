/* The strict JSON parser of json.h. Recursive descent over the text with a
 * depth limit; nodes grow in one array (doubling), strings are decoded into
 * one arena of len + 1 bytes: a decoded string never exceeds its quoted
 * source, which leaves room for its NUL. */
#include "json.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const unsigned char *s;
    size_t len, pos;
    const char *label;
    attn__json *j;
    int64_t cap;
    size_t arena_used;
    attn__json_limits lim;
} jp;

static attn_status jfail(const jp *p, const char *what) {
    return attn__fail(ATTN_E_FORMAT, "%s: malformed JSON: %s at byte %zu",
                      p->label, what, p->pos);
}

char *attn__escape_bytes(const char *s, size_t n, char *out, size_t cap) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (!cap) return out;
    for (size_t i = 0; s && i < n && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        size_t need = (c >= 0x20 && c < 0x7f && c != '\\') ? 1 : 4;
        if (o + need + 4 > cap) { /* room for "..." and the NUL */
            if (o + 4 <= cap) memcpy(out + o, "...", 3), o += 3;
            break;
        }
        if (need == 1) {
            out[o++] = (char)c;
        } else {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
    return out;
}

static void skip_ws(jp *p) {
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                               p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

/* A new node's index in *idx; ATTN_E_FORMAT past the limit, or
 * ATTN_E_NOMEM. */
static attn_status new_node(jp *p, attn__json_kind kind, int64_t *idx) {
    attn__json *j = p->j;
    if (p->lim.max_nodes && j->n >= p->lim.max_nodes) {
        char what[96];
        snprintf(what, sizeof what, "more than %lld values",
                 (long long)p->lim.max_nodes);
        return jfail(p, what);
    }
    if (j->n == p->cap) {
        /* doubling, but never past what the text can hold: a value takes
         * at least one byte and its separator */
        const int64_t most = (int64_t)(p->len / 2) + 1;
        int64_t cap = p->cap ? p->cap * 2 : 64;
        if (cap > most) cap = most > p->cap ? most : p->cap + 1;
        if (cap > INT32_MAX) return jfail(p, "more than 2^31 values");
        attn__json_node *nn =
            attn__alloc((size_t)cap, sizeof *nn, "JSON nodes");
        if (!nn) return ATTN_E_NOMEM;
        if (j->n) memcpy(nn, j->nodes, sizeof *nn * (size_t)j->n);
        attn__free(j->nodes);
        j->nodes = nn;
        p->cap = cap;
    }
    attn__json_node *n = &j->nodes[j->n];
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    if (kind == ATTN__JSON_ARR || kind == ATTN__JSON_OBJ) n->child = -1;
    n->next = -1;
    n->pos = (uint32_t)p->pos;
    *idx = j->n++;
    return ATTN_OK;
}

static int hex4(const unsigned char *s, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = s[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return 0;
        *v = (*v << 4) | d;
    }
    return 1;
}

size_t attn__put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string at p->pos (the opening quote); *out points into the arena. */
static attn_status parse_string(jp *p, const char **out) {
    p->pos++; /* the quote */
    char *o = p->j->arena + p->arena_used, *start = o;
    for (;;) {
        if (p->pos >= p->len) return jfail(p, "unterminated string");
        unsigned c = p->s[p->pos];
        if (c == '"') break;
        if (c < 0x20) return jfail(p, "control character in a string");
        if (c == '\\') {
            if (p->pos + 1 >= p->len) return jfail(p, "unterminated string");
            unsigned e = p->s[p->pos + 1];
            const char *simple = strchr("\"\\/bfnrt", (int)e);
            if (e && simple) {
                static const char map[] = "\"\\/\b\f\n\r\t";
                *o++ = map[simple - "\"\\/bfnrt"];
                p->pos += 2;
                continue;
            }
            if (e != 'u') return jfail(p, "unknown escape in a string");
            uint32_t cp, lo;
            if (p->pos + 6 > p->len || !hex4(p->s + p->pos + 2, &cp))
                return jfail(p, "bad \\u escape");
            p->pos += 6;
            if (cp >= 0xdc00 && cp <= 0xdfff)
                return jfail(p, "lone low surrogate in a \\u escape");
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (p->pos + 6 > p->len || p->s[p->pos] != '\\' ||
                    p->s[p->pos + 1] != 'u' || !hex4(p->s + p->pos + 2, &lo) ||
                    lo < 0xdc00 || lo > 0xdfff)
                    return jfail(p, "high surrogate without its low half");
                p->pos += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (cp == 0) return jfail(p, "\\u0000 in a string");
            o += attn__put_utf8(o, cp);
            continue;
        }
        uint32_t cp;
        size_t n = attn__utf8_next(p->s + p->pos, p->len - p->pos, &cp);
        if (!n) return jfail(p, "invalid UTF-8 in a string");
        memcpy(o, p->s + p->pos, n);
        o += n;
        p->pos += n;
    }
    p->pos++;
    *o++ = '\0';
    p->arena_used = (size_t)(o - p->j->arena);
    *out = start;
    return ATTN_OK;
}

static int is_digit(unsigned c) { return c >= '0' && c <= '9'; }

static attn_status parse_number(jp *p, attn__json_node *n) {
    size_t b = p->pos;
    int integer = 1;
    if (p->pos < p->len && p->s[p->pos] == '-') p->pos++;
    if (p->pos >= p->len || !is_digit(p->s[p->pos]))
        return jfail(p, "expected a digit");
    if (p->s[p->pos] == '0')
        p->pos++;
    else
        while (p->pos < p->len && is_digit(p->s[p->pos])) p->pos++;
    if (p->pos < p->len && p->s[p->pos] == '.') {
        integer = 0;
        p->pos++;
        if (p->pos >= p->len || !is_digit(p->s[p->pos]))
            return jfail(p, "expected a digit after '.'");
        while (p->pos < p->len && is_digit(p->s[p->pos])) p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        integer = 0;
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
            p->pos++;
        if (p->pos >= p->len || !is_digit(p->s[p->pos]))
            return jfail(p, "expected a digit in the exponent");
        while (p->pos < p->len && is_digit(p->s[p->pos])) p->pos++;
    }
    char buf[64];
    size_t len = p->pos - b;
    if (len >= sizeof buf) {
        n->num = 0; /* absurdly long: keep syntax checked, value unusable */
        n->is_int = 0;
        if (integer) return jfail(p, "integer too long");
        return ATTN_OK;
    }
    memcpy(buf, p->s + b, len);
    buf[len] = '\0';
    n->num = strtod(buf, NULL);
    if (integer) {
        int neg = buf[0] == '-';
        uint64_t v = 0;
        int ok = 1;
        for (size_t i = (size_t)neg; i < len; i++) {
            unsigned d = (unsigned)(buf[i] - '0');
            if (v > (UINT64_C(9223372036854775807) - d) / 10) {
                ok = 0;
                break;
            }
            v = v * 10 + d;
        }
        n->is_int = ok;
        if (ok) n->i64 = neg ? -(int64_t)v : (int64_t)v;
    }
    return ATTN_OK;
}

static attn_status parse_value(jp *p, int depth, int64_t *out);

static attn_status parse_container(jp *p, int depth, int64_t idx, int obj) {
    const unsigned char close = obj ? '}' : ']';
    int32_t last = -1;
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        return ATTN_OK;
    }
    for (;;) {
        const char *key = NULL;
        attn_status st;
        skip_ws(p);
        if (obj) {
            if (p->pos >= p->len || p->s[p->pos] != '"')
                return jfail(p, "expected a quoted key");
            if ((st = parse_string(p, &key))) return st;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':')
                return jfail(p, "expected ':' after a key");
            p->pos++;
        }
        int64_t c;
        if (!obj && p->lim.max_array &&
            p->j->nodes[idx].count >= p->lim.max_array) {
            char what[96];
            snprintf(what, sizeof what, "an array of more than %lld elements",
                     (long long)p->lim.max_array);
            return jfail(p, what);
        }
        if ((st = parse_value(p, depth + 1, &c))) return st;
        attn__json_node *nodes = p->j->nodes; /* may have moved */
        nodes[c].key = key;
        if (last < 0)
            nodes[idx].child = (int32_t)c;
        else
            nodes[last].next = (int32_t)c;
        last = (int32_t)c;
        nodes[idx].count++;
        skip_ws(p);
        if (p->pos >= p->len)
            return jfail(p, obj ? "unterminated object" : "unterminated array");
        if (p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->s[p->pos] == close) {
            p->pos++;
            return ATTN_OK;
        }
        return jfail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static attn_status parse_value(jp *p, int depth, int64_t *out) {
    skip_ws(p);
    if (depth > p->lim.max_depth) {
        char what[64];
        snprintf(what, sizeof what, "nesting deeper than %d", p->lim.max_depth);
        return jfail(p, what);
    }
    if (p->pos >= p->len) return jfail(p, "expected a value");
    unsigned c = p->s[p->pos];
    attn__json_kind kind;
    if (c == '{')
        kind = ATTN__JSON_OBJ;
    else if (c == '[')
        kind = ATTN__JSON_ARR;
    else if (c == '"')
        kind = ATTN__JSON_STR;
    else if (c == 't' || c == 'f')
        kind = ATTN__JSON_BOOL;
    else if (c == 'n')
        kind = ATTN__JSON_NULL;
    else if (c == '-' || is_digit(c))
        kind = ATTN__JSON_NUM;
    else
        return jfail(p, "expected a value");
    int64_t idx = 0;
    attn_status st = new_node(p, kind, &idx);
    if (st) return st;
    *out = idx;
    attn__json_node *n = &p->j->nodes[idx];
    switch (kind) {
    case ATTN__JSON_OBJ: return parse_container(p, depth, idx, 1);
    case ATTN__JSON_ARR: return parse_container(p, depth, idx, 0);
    case ATTN__JSON_STR: return parse_string(p, &n->str);
    case ATTN__JSON_NUM: return parse_number(p, n);
    default: break;
    }
    static const char *const words[3] = {"true", "false", "null"};
    const char *w = c == 't' ? words[0] : c == 'f' ? words[1] : words[2];
    size_t wl = strlen(w);
    if (p->len - p->pos < wl || memcmp(p->s + p->pos, w, wl) != 0)
        return jfail(p, "expected true, false or null");
    p->pos += wl;
    if (kind == ATTN__JSON_BOOL) n->num = c == 't';
    return ATTN_OK;
}

attn_status attn__json_parse_lim(const char *text, size_t len,
                                 const char *label,
                                 const attn__json_limits *lim, attn__json *j) {
    if (!j) return attn__fail(ATTN_E_INVALID, "j is NULL");
    memset(j, 0, sizeof *j);
    if (!text && len) return attn__fail(ATTN_E_INVALID, "text is NULL");
    if (len > UINT32_MAX)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: %zu bytes of JSON (at most 4 GiB)",
                          label ? label : "JSON", len);
    jp p = {
        (const unsigned char *)text, len, 0, label ? label : "JSON", j, 0, 0,
        {0, 0, ATTN__JSON_MAX_DEPTH}};
    if (lim) {
        p.lim.max_nodes = lim->max_nodes > 0 ? lim->max_nodes : 0;
        p.lim.max_array = lim->max_array > 0 ? lim->max_array : 0;
        if (lim->max_depth > 0 && lim->max_depth < ATTN__JSON_MAX_DEPTH)
            p.lim.max_depth = lim->max_depth;
    }
    j->arena = attn__alloc(len + 1, 1, "JSON strings");
    if (!j->arena) return ATTN_E_NOMEM;
    int64_t root;
    attn_status st = parse_value(&p, 0, &root);
    if (!st) {
        skip_ws(&p);
        if (p.pos != p.len) st = jfail(&p, "text after the value");
    }
    if (st) attn__json_free(j);
    return st;
}

attn_status attn__json_parse(const char *text, size_t len, const char *label,
                             attn__json *j) {
    return attn__json_parse_lim(text, len, label, NULL, j);
}

void attn__json_free(attn__json *j) {
    if (!j) return;
    attn__free(j->nodes);
    attn__free(j->arena);
    memset(j, 0, sizeof *j);
}

const attn__json_node *attn__json_get(const attn__json *j,
                                      const attn__json_node *obj,
                                      const char *key) {
    if (!j || !obj || obj->kind != ATTN__JSON_OBJ) return NULL;
    for (int64_t c = obj->child; c >= 0; c = j->nodes[c].next)
        if (strcmp(j->nodes[c].key, key) == 0) return &j->nodes[c];
    return NULL;
}

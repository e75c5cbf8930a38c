/* Byte-level BPE from a Hugging Face tokenizer.json: the JSON is read by
 * the project's strict parser (after a count of its values, so that a
 * file of tiny values cannot ask for nodes far beyond its size), then
 * every part the tokenizer's behaviour depends on is recognized or
 * refused by name: model, normalizer, pre-tokenizer, post-processor,
 * decoder, added tokens. */
#include "../io/json.h"
#include "bpe_spec.h"

#include <string.h>

#define BPE_MAX_JSON ((size_t)128 << 20)

static const char *const GPT2_RE =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";
static const char *const LLAMA3_RE =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const QWEN2_RE =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct {
    const attn__json *j;
    const char *label;
} jr;

static const attn__json_node *get(const jr *r, const attn__json_node *o,
                                  const char *key) {
    return attn__json_get(r->j, o, key);
}

static const attn__json_node *child(const jr *r, const attn__json_node *n) {
    return n->child >= 0 ? &r->j->nodes[n->child] : NULL;
}

static const attn__json_node *next(const jr *r, const attn__json_node *n) {
    return n->next >= 0 ? &r->j->nodes[n->next] : NULL;
}

static attn_status unsupported(const jr *r, const char *part, const char *what,
                               const char *hint) {
    char eb[160];
    return attn__fail(ATTN_E_UNSUPPORTED, "%s: %s '%s' is not supported%s%s",
                      r->label, part,
                      attn__escape_bytes(what, strlen(what), eb, sizeof eb),
                      hint ? ": " : "", hint ? hint : "");
}

static attn_status malformed(const jr *r, const char *what) {
    return attn__fail(ATTN_E_FORMAT, "%s: %s", r->label, what);
}

/* The "type" string of object n, "" if it has none. */
static const char *type_of(const jr *r, const attn__json_node *n) {
    const attn__json_node *t =
        n && n->kind == ATTN__JSON_OBJ ? get(r, n, "type") : NULL;
    return t && t->kind == ATTN__JSON_STR ? t->str : "";
}

/* Member key of o as a boolean: def when absent or null, -1 when not a
 * boolean. */
static int get_bool(const jr *r, const attn__json_node *o, const char *key,
                    int def) {
    const attn__json_node *v = get(r, o, key);
    if (!v || v->kind == ATTN__JSON_NULL) return def;
    return v->kind == ATTN__JSON_BOOL ? (int)v->num : -1;
}

/* Member key absent, null, or a string equal to one of ok (NULL-ended). */
static int str_is(const jr *r, const attn__json_node *o, const char *key,
                  const char *const *ok) {
    const attn__json_node *v = get(r, o, key);
    if (!v || v->kind == ATTN__JSON_NULL) return 1;
    if (v->kind != ATTN__JSON_STR) return 0;
    for (int i = 0; ok[i]; i++)
        if (strcmp(v->str, ok[i]) == 0) return 1;
    return 0;
}

static attn_status read_model(const jr *r, const attn__json_node *m,
                              attn__bpe_spec *sp) {
    if (!m || m->kind != ATTN__JSON_OBJ)
        return malformed(r, "no \"model\" object");
    const char *ty = type_of(r, m);
    if (strcmp(ty, "BPE") != 0)
        return unsupported(r, "model", ty[0] ? ty : "(no type)",
                           "attn reads byte-level BPE only");
    static const char *const empty[] = {"", NULL};
    if (get_bool(r, m, "byte_fallback", 0) != 0)
        return unsupported(r, "model", "BPE with byte_fallback",
                           "sentencepiece-style BPE");
    const attn__json_node *d = get(r, m, "dropout");
    if (d && d->kind != ATTN__JSON_NULL &&
        !(d->kind == ATTN__JSON_NUM && d->num == 0))
        return unsupported(r, "model", "BPE with dropout", NULL);
    if (!str_is(r, m, "continuing_subword_prefix", empty) ||
        !str_is(r, m, "end_of_word_suffix", empty))
        return unsupported(r, "model", "BPE with subword affixes", NULL);
    int fuse = get_bool(r, m, "fuse_unk", 0),
        ign = get_bool(r, m, "ignore_merges", 0);
    if (fuse < 0 || ign < 0)
        return malformed(r, "fuse_unk and ignore_merges must be booleans");
    sp->fuse_unk = fuse;
    sp->ignore_merges = ign;
    const attn__json_node *u = get(r, m, "unk_token");
    if (u && u->kind == ATTN__JSON_STR && u->str[0]) {
        sp->unk = u->str;
        sp->unk_len = strlen(u->str);
    } else if (u && u->kind != ATTN__JSON_NULL && u->kind != ATTN__JSON_STR) {
        return malformed(r, "unk_token must be a string or null");
    }
    const attn__json_node *v = get(r, m, "vocab");
    if (!v || v->kind != ATTN__JSON_OBJ || v->count < 1)
        return malformed(r, "model.vocab must be a non-empty object");
    sp->vocab = attn__alloc((size_t)v->count, sizeof *sp->vocab, "vocabulary");
    if (!sp->vocab) return ATTN_E_NOMEM;
    for (const attn__json_node *e = child(r, v); e; e = next(r, e)) {
        if (e->kind != ATTN__JSON_NUM || !e->is_int || e->i64 < 0 ||
            e->i64 >= INT32_MAX) {
            char eb[96];
            return attn__fail(
                ATTN_E_FORMAT,
                "%s: the id of token '%s' is not an integer in "
                "[0, 2^31 - 1)",
                r->label,
                attn__escape_bytes(e->key, strlen(e->key), eb, sizeof eb));
        }
        attn__bpe_entry x = {e->key, strlen(e->key), (int32_t)e->i64};
        sp->vocab[sp->nvocab++] = x;
        if (x.len > sp->max_len) sp->max_len = x.len;
    }
    const attn__json_node *mg = get(r, m, "merges");
    if (!mg || mg->kind != ATTN__JSON_ARR || mg->count >= INT32_MAX)
        return malformed(r, "model.merges must be an array");
    sp->merges =
        attn__alloc((size_t)mg->count + 1, sizeof *sp->merges, "merges");
    if (!sp->merges) return ATTN_E_NOMEM;
    for (const attn__json_node *e = child(r, mg); e; e = next(r, e)) {
        attn__bpe_pair p;
        if (e->kind == ATTN__JSON_STR) { /* "left right" */
            const char *s = strchr(e->str, ' ');
            if (!s || s == e->str || !s[1] || strchr(s + 1, ' ')) {
                char eb[96];
                return attn__fail(
                    ATTN_E_FORMAT, "%s: merge '%s' is not 'left right'",
                    r->label,
                    attn__escape_bytes(e->str, strlen(e->str), eb, sizeof eb));
            }
            p.a = e->str;
            p.alen = (size_t)(s - e->str);
            p.b = s + 1;
        } else { /* ["left", "right"] */
            const attn__json_node *a =
                e->kind == ATTN__JSON_ARR ? child(r, e) : NULL;
            const attn__json_node *b = a ? next(r, a) : NULL;
            if (!b || e->count != 2 || a->kind != ATTN__JSON_STR ||
                b->kind != ATTN__JSON_STR || !a->str[0] || !b->str[0])
                return malformed(r, "a merge is neither \"left right\" nor "
                                    "[\"left\", \"right\"]");
            p.a = a->str;
            p.alen = strlen(a->str);
            p.b = b->str;
        }
        p.blen = strlen(p.b);
        sp->merges[sp->nmerges++] = p;
        if (p.alen + p.blen > sp->max_len) sp->max_len = p.alen + p.blen;
    }
    return ATTN_OK;
}

/* None, NFC, or a Sequence of at most one NFC. */
static attn_status read_normalizer(const jr *r, const attn__json_node *n,
                                   attn__bpe_spec *sp) {
    if (!n || n->kind == ATTN__JSON_NULL) return ATTN_OK;
    const char *ty = type_of(r, n);
    const attn__json_node *list = get(r, n, "normalizers");
    if (strcmp(ty, "Sequence") == 0 && list && list->kind == ATTN__JSON_ARR &&
        list->count <= 1) {
        if (list->count == 0) return ATTN_OK;
        n = child(r, list);
        ty = type_of(r, n);
    }
    if (strcmp(ty, "NFC") == 0) {
        sp->nfc = 1;
        return ATTN_OK;
    }
    return unsupported(r, "normalizer", ty[0] ? ty : "(no type)",
                       "attn's byte-level BPE reads NFC or none");
}

/* A ByteLevel pre-tokenizer: its options, or an error. */
static attn_status byte_level(const jr *r, const attn__json_node *n,
                              int *prefix, int *regex) {
    *prefix = get_bool(r, n, "add_prefix_space", 1);
    *regex = get_bool(r, n, "use_regex", 1);
    if (*prefix < 0 || *regex < 0)
        return malformed(r, "ByteLevel options must be booleans");
    return ATTN_OK;
}

static attn_status read_pre(const jr *r, const attn__json_node *n,
                            attn__bpe_spec *sp) {
    const char *ty = type_of(r, n);
    int prefix, regex;
    attn_status st;
    if (strcmp(ty, "ByteLevel") == 0) {
        if ((st = byte_level(r, n, &prefix, &regex))) return st;
        sp->pre = regex ? ATTN__PRE_GPT2 : ATTN__PRE_NONE;
        sp->add_prefix_space = prefix;
        return ATTN_OK;
    }
    const attn__json_node *list =
        strcmp(ty, "Sequence") == 0 ? get(r, n, "pretokenizers") : NULL;
    if (!list || list->kind != ATTN__JSON_ARR)
        return unsupported(r, "pre-tokenizer", ty[0] ? ty : "(none)",
                           "attn reads ByteLevel, Split + ByteLevel and "
                           "Digits + ByteLevel");
    const attn__json_node *a = child(r, list), *b = a ? next(r, a) : NULL;
    if (list->count == 1) return read_pre(r, a, sp);
    const char *ta = type_of(r, a), *tb = type_of(r, b);
    if (list->count != 2 || strcmp(tb, "ByteLevel") != 0)
        return unsupported(r, "pre-tokenizer sequence of",
                           list->count != 2 ? "more than two" : tb,
                           "attn reads Split + ByteLevel and Digits + "
                           "ByteLevel");
    if ((st = byte_level(r, b, &prefix, &regex))) return st;
    if (prefix)
        return unsupported(r, "pre-tokenizer",
                           "ByteLevel with add_prefix_space "
                           "after another",
                           NULL);
    if (strcmp(ta, "Digits") == 0) {
        if (get_bool(r, a, "individual_digits", 0) != 1 || !regex)
            return unsupported(r, "pre-tokenizer",
                               "Digits without "
                               "individual_digits",
                               NULL);
        sp->pre = ATTN__PRE_SMOLLM;
        return ATTN_OK;
    }
    static const char *const isolated[] = {"Isolated", NULL};
    if (strcmp(ta, "Split") != 0 || regex)
        return unsupported(r, "pre-tokenizer", ta[0] ? ta : "(no type)",
                           "before ByteLevel attn reads Split (without "
                           "ByteLevel's regex) and Digits");
    const attn__json_node *p = get(r, a, "pattern");
    const attn__json_node *re = p ? get(r, p, "Regex") : NULL;
    if (!re || re->kind != ATTN__JSON_STR ||
        !str_is(r, a, "behavior", isolated) || get_bool(r, a, "invert", 0) != 0)
        return unsupported(r, "pre-tokenizer", "Split",
                           "attn reads an isolating Split by a Regex pattern");
    if (strcmp(re->str, GPT2_RE) == 0)
        sp->pre = ATTN__PRE_GPT2;
    else if (strcmp(re->str, LLAMA3_RE) == 0)
        sp->pre = ATTN__PRE_LLAMA3;
    else if (strcmp(re->str, QWEN2_RE) == 0)
        sp->pre = ATTN__PRE_QWEN2;
    else
        return unsupported(r, "Split pattern", re->str,
                           "attn knows the patterns of GPT-2, Llama 3 and "
                           "Qwen2");
    return ATTN_OK;
}

/* The ids a TemplateProcessing puts around one sequence. */
static attn_status read_template(const jr *r, const attn__json_node *n,
                                 attn__bpe_spec *sp) {
    const attn__json_node *single = get(r, n, "single");
    const attn__json_node *sps = get(r, n, "special_tokens");
    if (!single || single->kind != ATTN__JSON_ARR)
        return malformed(r, "TemplateProcessing has no \"single\" list");
    int seen_a = 0;
    for (const attn__json_node *it = child(r, single); it; it = next(r, it)) {
        const attn__json_node *seq = get(r, it, "Sequence");
        const attn__json_node *tok = get(r, it, "SpecialToken");
        if (seq) {
            if (seen_a)
                return malformed(r, "TemplateProcessing has two sequences");
            seen_a = 1;
            continue;
        }
        const attn__json_node *name = tok ? get(r, tok, "id") : NULL;
        const attn__json_node *def = name && name->kind == ATTN__JSON_STR
                                         ? get(r, sps, name->str)
                                         : NULL;
        const attn__json_node *ids = def ? get(r, def, "ids") : NULL;
        if (!ids || ids->kind != ATTN__JSON_ARR)
            return malformed(r, "a TemplateProcessing token is not in its "
                                "special_tokens");
        for (const attn__json_node *i = child(r, ids); i; i = next(r, i)) {
            int *cnt = seen_a ? &sp->nsuffix : &sp->nprefix;
            if (i->kind != ATTN__JSON_NUM || !i->is_int || *cnt >= 4)
                return malformed(r, "TemplateProcessing ids must be at most "
                                    "4 integers each side");
            (seen_a ? sp->suffix : sp->prefix)[(*cnt)++] = i->i64;
        }
    }
    if (!seen_a) return malformed(r, "TemplateProcessing has no sequence");
    return ATTN_OK;
}

static attn_status read_post(const jr *r, const attn__json_node *n,
                             attn__bpe_spec *sp, int depth) {
    if (!n || n->kind == ATTN__JSON_NULL) return ATTN_OK;
    const char *ty = type_of(r, n);
    if (strcmp(ty, "ByteLevel") == 0) return ATTN_OK; /* offsets only */
    if (strcmp(ty, "TemplateProcessing") == 0) {
        if (sp->nprefix || sp->nsuffix)
            return malformed(r, "two post-processors add tokens");
        return read_template(r, n, sp);
    }
    if (strcmp(ty, "RobertaProcessing") == 0 ||
        strcmp(ty, "BertProcessing") == 0) {
        const attn__json_node *c = get(r, n, "cls"), *s = get(r, n, "sep");
        const attn__json_node *ci =
            c && c->count == 2 ? next(r, child(r, c)) : NULL;
        const attn__json_node *si =
            s && s->count == 2 ? next(r, child(r, s)) : NULL;
        if (!ci || !si || !ci->is_int || !si->is_int ||
            ci->kind != ATTN__JSON_NUM || si->kind != ATTN__JSON_NUM ||
            sp->nprefix || sp->nsuffix)
            return malformed(r, "cls and sep must be [token, id]");
        sp->prefix[sp->nprefix++] = ci->i64;
        sp->suffix[sp->nsuffix++] = si->i64;
        return ATTN_OK;
    }
    const attn__json_node *list = get(r, n, "processors");
    if (strcmp(ty, "Sequence") == 0 && list && list->kind == ATTN__JSON_ARR &&
        depth < 4) {
        for (const attn__json_node *p = child(r, list); p; p = next(r, p)) {
            attn_status st = read_post(r, p, sp, depth + 1);
            if (st) return st;
        }
        return ATTN_OK;
    }
    return unsupported(r, "post-processor", ty[0] ? ty : "(no type)", NULL);
}

static attn_status read_decoder(const jr *r, const attn__json_node *n) {
    const char *ty = type_of(r, n);
    if (strcmp(ty, "ByteLevel") == 0) return ATTN_OK;
    return unsupported(r, "decoder", ty[0] ? ty : "(none)",
                       "attn decodes with ByteLevel");
}

static attn_status read_added(const jr *r, const attn__json_node *n,
                              attn__bpe_spec *sp) {
    if (!n || n->kind == ATTN__JSON_NULL) return ATTN_OK;
    if (n->kind != ATTN__JSON_ARR)
        return malformed(r, "added_tokens must be a list");
    sp->added =
        attn__alloc((size_t)n->count + 1, sizeof *sp->added, "added tokens");
    if (!sp->added) return ATTN_E_NOMEM;
    for (const attn__json_node *a = child(r, n); a; a = next(r, a)) {
        const attn__json_node *id = get(r, a, "id"), *c = get(r, a, "content");
        if (!id || !c || id->kind != ATTN__JSON_NUM || !id->is_int ||
            id->i64 < 0 || id->i64 >= INT32_MAX || c->kind != ATTN__JSON_STR)
            return malformed(r, "an added token needs an integer id and a "
                                "string content");
        int sw = get_bool(r, a, "single_word", 0),
            sp_ = get_bool(r, a, "special", 0);
        int ls = get_bool(r, a, "lstrip", 0), rs = get_bool(r, a, "rstrip", 0);
        if (sw < 0 || sp_ < 0 || ls < 0 || rs < 0)
            return malformed(r, "added token flags must be booleans");
        if (sw) return unsupported(r, "added token", c->str, "single_word");
        attn__bpe_added *x = &sp->added[sp->nadded++];
        x->e.str = c->str;
        x->e.len = strlen(c->str);
        x->e.id = (int32_t)id->i64;
        x->special = (uint8_t)sp_;
        x->lstrip = (uint8_t)ls;
        x->rstrip = (uint8_t)rs;
    }
    return ATTN_OK;
}

/* Values in text[0..len) (an upper bound: separators and openings outside
 * strings, plus one). */
static size_t count_values(const char *text, size_t len) {
    size_t n = 1;
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == ',' || c == '[' || c == '{') {
            n++;
        }
    }
    return n;
}

attn_status attn_bpe_parse(const char *json, size_t len, const char *label,
                           attn_bpe **out) {
    if (!out) return attn__fail(ATTN_E_INVALID, "out is NULL");
    *out = NULL;
    if (!json && len) return attn__fail(ATTN_E_INVALID, "json is NULL");
    if (!label) label = "tokenizer.json";
    if (len > BPE_MAX_JSON)
        return attn__fail(ATTN_E_FORMAT, "%s: %zu bytes (at most %zu)", label,
                          len, BPE_MAX_JSON);
    size_t nv = count_values(json, len);
    if (nv > len / 3 + 65536) /* each node costs 80 bytes */
        return attn__fail(ATTN_E_FORMAT,
                          "%s: about %zu JSON values in %zu bytes: too many "
                          "for a tokenizer",
                          label, nv, len);
    attn__json j;
    attn_status st = attn__json_parse(json, len, label, &j);
    if (st) return st;
    jr r = {&j, label};
    attn__bpe_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.label = label;
    sp.unk_id = -1;
    const attn__json_node *root = &j.nodes[0];
    if (root->kind != ATTN__JSON_OBJ) st = malformed(&r, "not a JSON object");
    if (!st) st = read_model(&r, get(&r, root, "model"), &sp);
    if (!st) st = read_normalizer(&r, get(&r, root, "normalizer"), &sp);
    if (!st) st = read_pre(&r, get(&r, root, "pre_tokenizer"), &sp);
    if (!st) st = read_post(&r, get(&r, root, "post_processor"), &sp, 0);
    if (!st) st = read_decoder(&r, get(&r, root, "decoder"));
    if (!st) st = read_added(&r, get(&r, root, "added_tokens"), &sp);
    if (!st) st = attn__bpe_build(&sp, out);
    attn__free(sp.vocab);
    attn__free(sp.merges);
    attn__free(sp.added);
    attn__json_free(&j);
    return st;
}

attn_status attn_bpe_load(const char *path, attn_bpe **out) {
    if (!out) return attn__fail(ATTN_E_INVALID, "out is NULL");
    *out = NULL;
    if (!path) return attn__fail(ATTN_E_INVALID, "path is NULL");
    FILE *f = fopen(path, "rb");
    if (!f) return attn__fail(ATTN_E_IO, "%s: cannot open", path);
    attn_status st = ATTN_OK;
    char *buf = NULL;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
    if (len < 0)
        st = attn__fail(ATTN_E_IO, "%s: not a regular file", path);
    else if ((size_t)len > BPE_MAX_JSON)
        st = attn__fail(ATTN_E_FORMAT, "%s: %ld bytes (at most %zu)", path, len,
                        BPE_MAX_JSON);
    else if (!(buf = attn__alloc((size_t)len + 1, 1, "tokenizer.json")))
        st = ATTN_E_NOMEM;
    else {
        rewind(f);
        if (fread(buf, 1, (size_t)len, f) != (size_t)len)
            st = attn__fail(ATTN_E_IO, "%s: reading failed", path);
    }
    fclose(f);
    if (!st) st = attn_bpe_parse(buf, (size_t)len, path, out);
    attn__free(buf);
    return st;
}

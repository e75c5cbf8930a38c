/* Byte-level BPE: the tables, made from one description (vocabulary,
 * merges, added tokens, pre-tokenizer, post-processor tokens) that both
 * forms fill: tokenizer.json (bpe_json.c) and the GGUF-style arrays
 * (attn_bpe_from_vocab, here). Every string, id and merge is checked
 * before use; memory is in proportion to the description. */
#include "bpe_spec.h"

#include <string.h>

/* ---- the byte alphabet -------------------------------------------------- */

/* Printable Latin-1 bytes stand for themselves; the others (controls,
 * space, DEL, NBSP, soft hyphen) are written as U+0100 + their index among
 * them, as GPT-2's bytes_to_unicode does. */
static int printable(unsigned b) {
    return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) ||
           (b >= 0xae && b <= 0xff);
}

uint32_t attn__bpe_byte_cp(unsigned b) {
    if (printable(b)) return b;
    uint32_t k = 0;
    for (unsigned c = 0; c < b; c++) k += !printable(c);
    return 256 + k;
}

int attn__bpe_cp_byte(uint32_t cp) {
    if (cp < 256) return printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t k = 0;
    for (unsigned c = 0; c < 256; c++)
        if (!printable(c) && k++ == cp - 256) return (int)c;
    return -1;
}

/* The code point at s (valid UTF-8, as every string here is). */
static size_t utf8_cp(const unsigned char *s, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) return *cp = c, 1;
    if (c < 0xe0) return *cp = (c & 0x1fu) << 6 | (s[1] & 0x3fu), 2;
    if (c < 0xf0)
        return *cp = (c & 0x0fu) << 12 | (s[1] & 0x3fu) << 6 | (s[2] & 0x3fu),
               3;
    *cp = (c & 0x07u) << 18 | (s[1] & 0x3fu) << 12 | (s[2] & 0x3fu) << 6 |
          (s[3] & 0x3fu);
    return 4;
}

size_t attn__utf8_check(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k = c < 0x80                 ? 1
                   : c >= 0xc2 && c <= 0xdf ? 2
                   : c >= 0xe0 && c <= 0xef ? 3
                   : c >= 0xf0 && c <= 0xf4 ? 4
                                            : 0;
        if (k == 0 || n - i < k) return i;
        uint32_t cp = k == 1 ? c : c & (0x7fu >> k);
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return i;
            cp = cp << 6 | (s[i + j] & 0x3fu);
        }
        if ((k == 3 && cp < 0x800) ||
            (k == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return i;
        i += k;
    }
    return n;
}

/* What token str decodes to, written at o (at most its length): its bytes
 * when every character is in the alphabet, else str itself. */
static size_t token_bytes(const char *str, size_t len, char *o) {
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += utf8_cp((const unsigned char *)str + i, &cp);
        int b = attn__bpe_cp_byte(cp);
        if (b < 0) {
            memcpy(o, str, len);
            return len;
        }
        o[k++] = (char)b;
    }
    return k;
}

/* ---- lookups ------------------------------------------------------------ */

int32_t attn__bpe_vocab_id(const attn_bpe *t, const char *s, size_t n) {
    for (uint64_t i = attn__bpe_hash(s, n) & t->vmask;;
         i = (i + 1) & t->vmask) {
        int32_t id = t->vslot[i];
        if (id < 0) return -1;
        const char *v = t->tok[id].vstr;
        if (strncmp(v, s, n) == 0 && v[n] == '\0') return id;
    }
}

int32_t attn__bpe_child(const attn_bpe *t, int32_t nd, unsigned char c) {
    uint64_t key = (uint64_t)nd << 8 | c;
    for (uint64_t i = attn__splitmix64_final(key) & t->emask;;
         i = (i + 1) & t->emask) {
        if (t->edge[i].key == key) return t->edge[i].child;
        if (t->edge[i].key == UINT64_MAX) return -1;
    }
}

void attn_bpe_free(attn_bpe *t) {
    if (!t) return;
    ATTN__FREE_ALL(t->tok, t->arena, t->vslot, t->merge, t->node, t->edge, t);
}

int64_t attn_bpe_vocab_size(const attn_bpe *t) { return t ? t->n : 0; }

const char *attn_bpe_token(const attn_bpe *t, int64_t id) {
    return t && id >= 0 && id < t->n ? t->tok[id].str : NULL;
}

int attn_bpe_is_special(const attn_bpe *t, int64_t id) {
    return t && id >= 0 && id < t->n ? t->tok[id].special : 0;
}

attn_status attn_bpe_id(const attn_bpe *t, const char *token, int32_t *id) {
    ATTN__NONNULL("t, token, id", t, token, id);
    size_t n = strlen(token);
    int32_t nd = 0;
    for (size_t i = 0; i < n && nd >= 0; i++)
        nd = attn__bpe_child(t, nd, (unsigned char)token[i]);
    *id = n && nd >= 0 ? t->node[nd].id : -1;
    if (*id < 0) *id = attn__bpe_vocab_id(t, token, n);
    if (*id >= 0) return ATTN_OK;
    char eb[96];
    return attn__fail(ATTN_E_INVALID, "token '%s' is not in the vocabulary",
                      attn__escape_bytes(token, n, eb, sizeof eb));
}

/* ---- building ----------------------------------------------------------- */

static uint64_t pow2_above(uint64_t n) {
    uint64_t c = 16;
    while (c < 2 * n) c *= 2;
    return c;
}

static attn_status bad_str(const char *label, const char *what, const char *s,
                           size_t n) {
    char eb[96];
    return attn__fail(ATTN_E_FORMAT, "%s: %s '%s'", label, what,
                      attn__escape_bytes(s, n, eb, sizeof eb));
}

/* Stores str as token id's string (and the bytes it decodes to). */
static void put_token(attn_bpe *t, size_t *used, int32_t id, const char *str,
                      size_t len, int vocab) {
    char *s = t->arena + *used;
    memcpy(s, str, len);
    s[len] = '\0';
    *used += len + 1;
    char *b = t->arena + *used;
    size_t bl = token_bytes(s, len, b);
    *used += bl;
    attn__bpe_tok *k = &t->tok[id];
    k->str = s;
    k->bytes = b;
    k->blen = (uint32_t)bl;
    if (vocab) k->vstr = s;
    if (bl > t->max_blen) t->max_blen = (uint32_t)bl;
}

static attn_status build_vocab(attn_bpe *t, const attn__bpe_spec *sp,
                               size_t *used) {
    t->vmask = pow2_above((uint64_t)sp->nvocab) - 1;
    t->vslot = attn__alloc(t->vmask + 1, sizeof *t->vslot, "vocabulary hash");
    if (!t->vslot) return ATTN_E_NOMEM;
    for (uint64_t i = 0; i <= t->vmask; i++) t->vslot[i] = -1;
    for (int64_t v = 0; v < sp->nvocab; v++) {
        const attn__bpe_entry *e = &sp->vocab[v];
        if (t->tok[e->id].vstr)
            return attn__fail(ATTN_E_FORMAT,
                              "%s: id %d is given to two tokens of the "
                              "vocabulary",
                              sp->label, e->id);
        put_token(t, used, e->id, e->str, e->len, 1);
        uint64_t i = attn__bpe_hash(e->str, e->len) & t->vmask;
        for (;; i = (i + 1) & t->vmask) {
            int32_t o = t->vslot[i];
            if (o < 0 || strcmp(t->tok[o].vstr, t->tok[e->id].vstr) == 0) break;
        }
        t->vslot[i] = e->id; /* a repeated token keeps its last id */
    }
    for (unsigned b = 0; b < 256; b++) {
        char u[4];
        size_t k = attn__put_utf8(u, attn__bpe_byte_cp(b));
        t->byte_id[b] = attn__bpe_vocab_id(t, u, k);
    }
    return ATTN_OK;
}

static attn_status build_merges(attn_bpe *t, const attn__bpe_spec *sp) {
    t->mmask = pow2_above((uint64_t)sp->nmerges) - 1;
    t->merge = attn__alloc(t->mmask + 1, sizeof *t->merge, "merges");
    char *cat = attn__alloc(2 * (size_t)sp->max_len + 1, 1, "merge");
    if (!t->merge || !cat) {
        attn__free(cat);
        return ATTN_E_NOMEM;
    }
    for (uint64_t i = 0; i <= t->mmask; i++) t->merge[i].key = UINT64_MAX;
    attn_status st = ATTN_OK;
    for (int64_t r = 0; r < sp->nmerges && !st; r++) {
        const attn__bpe_pair *p = &sp->merges[r];
        int32_t a = attn__bpe_vocab_id(t, p->a, p->alen);
        int32_t b = attn__bpe_vocab_id(t, p->b, p->blen);
        memcpy(cat, p->a, p->alen);
        memcpy(cat + p->alen, p->b, p->blen);
        int32_t ab = attn__bpe_vocab_id(t, cat, p->alen + p->blen);
        if (a < 0 || b < 0 || ab < 0) {
            char ea[48], eb[48];
            st = attn__fail(ATTN_E_FORMAT,
                            "%s: merge %lld ('%s' '%s'): %s is not in the "
                            "vocabulary",
                            sp->label, (long long)r,
                            attn__escape_bytes(p->a, p->alen, ea, sizeof ea),
                            attn__escape_bytes(p->b, p->blen, eb, sizeof eb),
                            a < 0   ? "the left token"
                            : b < 0 ? "the right token"
                                    : "their concatenation");
            break;
        }
        uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
        uint64_t i = attn__splitmix64_final(key) & t->mmask;
        while (t->merge[i].key != UINT64_MAX && t->merge[i].key != key)
            i = (i + 1) & t->mmask;
        t->merge[i].key = key; /* a repeated merge keeps its last rank */
        t->merge[i].rank = (int32_t)r;
        t->merge[i].id = ab;
    }
    attn__free(cat);
    return st;
}

static attn_status build_added(attn_bpe *t, const attn__bpe_spec *sp,
                               size_t *used) {
    size_t total = 1;
    for (int64_t a = 0; a < sp->nadded; a++) total += sp->added[a].e.len;
    t->node = attn__alloc(total, sizeof *t->node, "added tokens");
    t->emask = pow2_above(total) - 1;
    t->edge = attn__alloc(t->emask + 1, sizeof *t->edge, "added tokens");
    if (!t->node || !t->edge) return ATTN_E_NOMEM;
    for (uint64_t i = 0; i <= t->emask; i++) t->edge[i].key = UINT64_MAX;
    memset(&t->node[0], 0, sizeof t->node[0]);
    t->node[0].id = -1;
    t->nnodes = 1;
    for (int64_t a = 0; a < sp->nadded; a++) {
        const attn__bpe_added *x = &sp->added[a];
        if (x->e.len == 0)
            return attn__fail(ATTN_E_FORMAT, "%s: added token %d is empty",
                              sp->label, x->e.id);
        if (x->e.len > ATTN__BPE_MAX_ADDED)
            return attn__fail(ATTN_E_FORMAT,
                              "%s: added token %d is %zu bytes long (at "
                              "most %d)",
                              sp->label, x->e.id, x->e.len,
                              ATTN__BPE_MAX_ADDED);
        attn__bpe_tok *k = &t->tok[x->e.id];
        if (!k->str || strcmp(k->str, x->e.str) != 0)
            put_token(t, used, x->e.id, x->e.str, x->e.len, 0);
        k->special = x->special;
        int32_t nd = 0;
        for (size_t i = 0; i < x->e.len; i++) {
            unsigned char c = (unsigned char)x->e.str[i];
            int32_t ch = attn__bpe_child(t, nd, c);
            if (ch < 0) {
                uint64_t key = (uint64_t)nd << 8 | c;
                uint64_t s = attn__splitmix64_final(key) & t->emask;
                while (t->edge[s].key != UINT64_MAX) s = (s + 1) & t->emask;
                ch = t->nnodes++;
                t->edge[s].key = key;
                t->edge[s].child = ch;
                memset(&t->node[ch], 0, sizeof t->node[ch]);
                t->node[ch].id = -1;
            }
            nd = ch;
        }
        t->first[(unsigned char)x->e.str[0]] = 1;
        t->node[nd].id = x->e.id; /* a repeated content keeps its last id */
        t->node[nd].special = x->special;
        t->node[nd].lstrip = x->lstrip;
        t->node[nd].rstrip = x->rstrip;
    }
    return ATTN_OK;
}

attn_status attn__bpe_build(const attn__bpe_spec *sp, attn_bpe **out) {
    *out = NULL;
    int64_t n = 0;
    size_t bytes = 1;
    for (int pass = 0; pass < 2; pass++) {
        const attn__bpe_entry *e = NULL;
        int64_t count = pass ? sp->nadded : sp->nvocab;
        for (int64_t i = 0; i < count; i++) {
            e = pass ? &sp->added[i].e : &sp->vocab[i];
            if (e->id < 0 || e->id >= INT32_MAX)
                return bad_str(sp->label, "id out of range for token", e->str,
                               e->len);
            if (e->id >= n) n = (int64_t)e->id + 1;
            bytes += 2 * e->len + 1;
        }
    }
    if (n == 0)
        return attn__fail(ATTN_E_FORMAT, "%s: the vocabulary is empty",
                          sp->label);
    if (n > 2 * (sp->nvocab + sp->nadded) + 65536)
        return attn__fail(
            ATTN_E_FORMAT, "%s: ids reach %lld for %lld tokens: too sparse",
            sp->label, (long long)n - 1, (long long)(sp->nvocab + sp->nadded));
    for (int k = 0; k < sp->nprefix + sp->nsuffix; k++) {
        int64_t id =
            k < sp->nprefix ? sp->prefix[k] : sp->suffix[k - sp->nprefix];
        if (id < 0 || id >= n)
            return attn__fail(ATTN_E_FORMAT,
                              "%s: post-processor token id %lld is outside "
                              "the vocabulary [0, %lld)",
                              sp->label, (long long)id, (long long)n);
    }
    attn_bpe *t = attn__alloc(1, sizeof *t, "tokenizer");
    if (!t) return ATTN_E_NOMEM;
    memset(t, 0, sizeof *t);
    t->n = n;
    t->tok = attn__alloc((size_t)n, sizeof *t->tok, "tokens");
    t->arena = attn__alloc(bytes, 1, "tokens");
    attn_status st = ATTN_OK;
    size_t used = 0;
    if (!t->tok || !t->arena) st = ATTN_E_NOMEM;
    if (!st) {
        memset(t->tok, 0, sizeof *t->tok * (size_t)n);
        st = build_vocab(t, sp, &used);
    }
    if (!st) st = build_merges(t, sp);
    if (!st) st = build_added(t, sp, &used);
    if (!st && sp->unk_len) {
        int32_t u;
        if (attn_bpe_id(t, sp->unk, &u) != ATTN_OK)
            st = bad_str(sp->label,
                         "the unknown token is not in the "
                         "vocabulary:",
                         sp->unk, sp->unk_len);
        t->unk = u;
    } else {
        t->unk = sp->unk_id;
    }
    if (st) {
        attn_bpe_free(t);
        return st;
    }
    t->pre = sp->pre;
    t->nfc = sp->nfc;
    t->add_prefix_space = sp->add_prefix_space;
    t->ignore_merges = sp->ignore_merges;
    t->fuse_unk = sp->fuse_unk;
    t->nprefix = sp->nprefix;
    t->nsuffix = sp->nsuffix;
    for (int k = 0; k < 4; k++) {
        t->prefix[k] = (int32_t)sp->prefix[k];
        t->suffix[k] = (int32_t)sp->suffix[k];
    }
    *out = t;
    return ATTN_OK;
}

/* ---- the GGUF form ------------------------------------------------------ */

void attn_bpe_vocab_init(attn_bpe_vocab *v) {
    if (!v) return;
    memset(v, 0, sizeof *v);
    v->bos_id = v->eos_id = -1;
    v->ignore_merges = -1;
}

int attn__bpe_pre_by_name(const char *name) {
    static const struct {
        const char *name;
        int pre;
    } pres[] = {{"gpt2", ATTN__PRE_GPT2},
                {"smollm", ATTN__PRE_SMOLLM},
                {"llama-bpe", ATTN__PRE_LLAMA3},
                {"llama3", ATTN__PRE_LLAMA3},
                {"qwen2", ATTN__PRE_QWEN2}};
    for (size_t i = 0; i < sizeof pres / sizeof pres[0]; i++)
        if (strcmp(name, pres[i].name) == 0) return pres[i].pre;
    return -1;
}

attn_status attn_bpe_from_vocab(const attn_bpe_vocab *v, attn_bpe **out) {
    if (!out) return attn__fail(ATTN_E_INVALID, "out is NULL");
    *out = NULL;
    if (!v || !v->pre || (v->n_tokens && !v->tokens) ||
        (v->n_merges && !v->merges))
        return attn__fail(ATTN_E_INVALID, "%s is NULL",
                          !v                            ? "v"
                          : !v->pre                     ? "v->pre"
                          : (v->n_tokens && !v->tokens) ? "v->tokens"
                                                        : "v->merges");
    if (v->n_tokens < 1 || v->n_tokens >= INT32_MAX || v->n_merges < 0 ||
        v->n_merges >= INT32_MAX)
        return attn__fail(ATTN_E_INVALID, "%lld tokens and %lld merges",
                          (long long)v->n_tokens, (long long)v->n_merges);
    attn__bpe_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.label = "vocabulary";
    sp.unk_id = -1;
    sp.pre = attn__bpe_pre_by_name(v->pre);
    if (sp.pre < 0) {
        char eb[64];
        return attn__fail(
            ATTN_E_UNSUPPORTED,
            "pre-tokenizer '%s' is not supported (gpt2, smollm, "
            "llama-bpe, qwen2)",
            attn__escape_bytes(v->pre, strlen(v->pre), eb, sizeof eb));
    }
    sp.ignore_merges = v->ignore_merges >= 0 ? v->ignore_merges != 0
                                             : sp.pre == ATTN__PRE_LLAMA3;
    const int64_t ids[2] = {v->bos_id, v->eos_id};
    const int add[2] = {v->add_bos, v->add_eos};
    for (int k = 0; k < 2; k++) {
        if (!add[k]) continue;
        if (ids[k] < 0 || ids[k] >= v->n_tokens)
            return attn__fail(ATTN_E_INVALID, "%s_id %lld is outside [0, %lld)",
                              k ? "eos" : "bos", (long long)ids[k],
                              (long long)v->n_tokens);
        if (k)
            sp.suffix[sp.nsuffix++] = ids[k];
        else
            sp.prefix[sp.nprefix++] = ids[k];
    }
    sp.nvocab = v->n_tokens;
    sp.vocab = attn__alloc((size_t)v->n_tokens, sizeof *sp.vocab, "vocabulary");
    sp.added = attn__alloc((size_t)v->n_tokens, sizeof *sp.added, "added");
    sp.merges =
        attn__alloc((size_t)v->n_merges + 1, sizeof *sp.merges, "merges");
    attn_status st = ATTN_OK;
    if (!sp.vocab || !sp.added || !sp.merges) st = ATTN_E_NOMEM;
    for (int64_t i = 0; i < v->n_tokens && !st; i++) {
        const char *s = v->tokens[i];
        if (!s) {
            st = attn__fail(ATTN_E_INVALID, "tokens[%lld] is NULL",
                            (long long)i);
            break;
        }
        size_t len = strlen(s);
        if (attn__utf8_check(s, len) != len) {
            st = bad_str(sp.label, "a token is not UTF-8:", s, len);
            break;
        }
        attn__bpe_entry e = {s, len, (int32_t)i};
        sp.vocab[i] = e;
        if (len > sp.max_len) sp.max_len = len;
        int type = v->token_types ? v->token_types[i] : 1;
        if (type < 1 || type > 6) {
            st = attn__fail(ATTN_E_INVALID, "token_types[%lld] is %d (1 .. 6)",
                            (long long)i, type);
            break;
        }
        if (type == 2) sp.unk_id = (int32_t)i;
        if (type == 3 || type == 4) {
            attn__bpe_added *a = &sp.added[sp.nadded++];
            memset(a, 0, sizeof *a);
            a->e = e;
            a->special = type == 3;
        }
    }
    for (int64_t r = 0; r < v->n_merges && !st; r++) {
        const char *m = v->merges[r];
        const char *sp1 = m ? strchr(m, ' ') : NULL;
        if (!sp1 || sp1 == m || !sp1[1] || strchr(sp1 + 1, ' ')) {
            st = m ? bad_str(sp.label, "a merge is not 'left right':", m,
                             strlen(m))
                   : attn__fail(ATTN_E_INVALID, "merges[%lld] is NULL",
                                (long long)r);
            break;
        }
        attn__bpe_pair p = {m, (size_t)(sp1 - m), sp1 + 1, strlen(sp1 + 1)};
        sp.merges[sp.nmerges++] = p;
        if (p.alen + p.blen > sp.max_len) sp.max_len = p.alen + p.blen;
    }
    if (!st) st = attn__bpe_build(&sp, out);
    attn__free(sp.vocab);
    attn__free(sp.added);
    attn__free(sp.merges);
    return st;
}

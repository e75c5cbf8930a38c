/* Chat templates (attn_chat.h): a template is recognized by comparing a
 * canonical form of it with the ChatML forms, never run. The canonical
 * form keeps the tags' text without whitespace outside string literals
 * and writes every literal as '...' with its value (escapes decoded, then
 * ' and \ escaped again), so that spacing and quoting do not matter while
 * the structure and every string must match. */
#include "attn_chat.h"
#include "internal.h"
#include "../io/binfile.h"
#include "../io/json.h"

#include <string.h>

struct attn_chat_template {
    char *default_system; /* NULL: none */
};

typedef struct {
    char *s;
    size_t n, cap;
    int nomem;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->nomem) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = attn__alloc(cap, 1, "chat template");
        if (!p) {
            b->nomem = 1;
            return;
        }
        if (b->n) memcpy(p, b->s, b->n);
        attn__free(b->s);
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

/* The canonical form of text (see above) into b; 0 if it is not a
 * sequence of well-formed tags ({% %} or {{ }}, literals closed). */
static int canonical(const char *text, size_t len, buf *b) {
    size_t i = 0;
    while (i < len) {
        if (i + 1 >= len || text[i] != '{' ||
            (text[i + 1] != '%' && text[i + 1] != '{'))
            return 0; /* text outside the tags */
        const char close = text[i + 1] == '%' ? '%' : '}';
        put(b, text + i, 2);
        i += 2;
        for (;;) {
            if (i >= len) return 0;
            const char c = text[i];
            if (c == close && i + 1 < len && text[i + 1] == '}') {
                put(b, text + i, 2);
                i += 2;
                break;
            }
            if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
                i++;
                continue;
            }
            if (c != '\'' && c != '"') {
                put(b, &c, 1);
                i++;
                continue;
            }
            put(b, "'", 1);
            for (i++;; i++) {
                if (i >= len) return 0;
                char d = text[i];
                if (d == c) break;
                if (d == '\\') {
                    if (++i >= len) return 0;
                    switch (text[i]) {
                    case 'n': d = '\n'; break;
                    case 't': d = '\t'; break;
                    case '\'':
                    case '"':
                    case '\\': d = text[i]; break;
                    default: return 0;
                    }
                }
                if (d == '\'' || d == '\\') put(b, "\\", 1);
                put(b, &d, 1);
            }
            put(b, "'", 1);
            i++;
        }
    }
    return 1;
}

/* The canonical forms of the pieces of the recognized templates. */
static const char *const HEAD = "{% for message in messages %}";
static const char *const SYS_OPEN =
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\n";
/* canonical already: the rest of the literal and the closing tags */
static const char *const SYS_CLOSE = "<|im_end|>\n'}}{%endif%}";
static const char *const BODY =
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

static char *canon_of(const char *piece, int partial) {
    buf b = {0};
    size_t n = strlen(piece);
    if (partial) { /* an open literal: canonicalize it closed, then open */
        char *t = attn__alloc(n + 8, 1, "chat template");
        if (!t) return NULL;
        memcpy(t, piece, n);
        memcpy(t + n, "'}}", 4);
        int ok = canonical(t, n + 3, &b);
        attn__free(t);
        if (!ok || b.nomem) {
            attn__free(b.s);
            return NULL;
        }
        b.s[b.n - 3] = '\0';
        return b.s;
    }
    if (!canonical(piece, n, &b) || b.nomem) {
        attn__free(b.s);
        return NULL;
    }
    return b.s;
}

static int starts(const char *s, const char *p) {
    return strncmp(s, p, strlen(p)) == 0;
}

static attn_status refuse(const char *text, size_t len) {
    char q[128];
    attn__escape_bytes(text, len, q, sizeof q);
    return attn__fail(ATTN_E_UNSUPPORTED,
                      "unsupported chat template '%s': only the ChatML "
                      "template is recognized (see attn_chat.h)",
                      q);
}

attn_status attn_chat_template_parse(const char *text, size_t len,
                                     attn_chat_template **out) {
    if (!out || !text) return attn__fail(ATTN_E_INVALID, "text or out is NULL");
    *out = NULL;
    if (len > (1u << 20) || memchr(text, 0, len)) return refuse(text, len);
    buf b = {0};
    char *head = canon_of(HEAD, 0), *sys_open = canon_of(SYS_OPEN, 1),
         *body = canon_of(BODY, 0);
    char *def = NULL;
    attn_status st = ATTN_OK;
    if (!head || !sys_open || !body) {
        st = attn__fail(ATTN_E_NOMEM, "out of memory for a chat template");
        goto done;
    }
    const int ok = canonical(text, len, &b);
    if (b.nomem) {
        st = attn__fail(ATTN_E_NOMEM, "out of memory for a chat template");
        goto done;
    }
    if (!ok || !b.s || !starts(b.s, head)) {
        st = refuse(text, len);
        goto done;
    }
    const char *p = b.s + strlen(head);
    if (starts(p, sys_open)) {
        /* the default system content, up to the closing piece (its
         * literal's value in canonical form: \' and \\ undone) */
        p += strlen(sys_open);
        const char *end = strstr(p, SYS_CLOSE);
        if (!end) {
            st = refuse(text, len);
            goto done;
        }
        if (!(def = attn__alloc((size_t)(end - p) + 1, 1, "chat template"))) {
            st = attn__fail(ATTN_E_NOMEM, "out of memory for a chat template");
            goto done;
        }
        size_t k = 0;
        int quote = 0; /* an unescaped ' ends the literal before end */
        for (const char *c = p; c < end; c++) {
            if (*c == '\'') quote = 1;
            if (*c == '\\') c++;
            def[k++] = *c;
        }
        if (quote) {
            st = refuse(text, len);
            goto done;
        }
        def[k] = '\0';
        p = end + strlen(SYS_CLOSE);
    }
    if (strcmp(p, body) != 0) {
        st = refuse(text, len);
        goto done;
    }
    attn_chat_template *t = attn__alloc(1, sizeof *t, "chat template");
    if (!t) {
        st = attn__fail(ATTN_E_NOMEM, "out of memory for a chat template");
        goto done;
    }
    t->default_system = def;
    def = NULL;
    *out = t;
done:
    attn__free(def);
    attn__free(b.s);
    attn__free(head);
    attn__free(sys_open);
    attn__free(body);
    return st;
}

void attn_chat_template_free(attn_chat_template *t) {
    if (!t) return;
    attn__free(t->default_system);
    attn__free(t);
}

const char *attn_chat_template_default_system(const attn_chat_template *t) {
    return t ? t->default_system : NULL;
}

typedef struct {
    char *out;
    size_t cap, n;
} sink;

static void emit(sink *k, const char *s) {
    const size_t m = strlen(s);
    if (k->out && k->n + m < k->cap) memcpy(k->out + k->n, s, m);
    k->n += m;
}

attn_status attn_chat_render(const attn_chat_template *t,
                             const attn_chat_message *msgs, int64_t n,
                             int flags, char *out, size_t cap, size_t *len) {
    if (!t || !len || !msgs || n < 1 || (!out && cap))
        return attn__fail(ATTN_E_INVALID,
                          "t, len or msgs is NULL (or n < 1, or out NULL "
                          "with cap > 0)");
    for (int64_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return attn__fail(ATTN_E_INVALID,
                              "message %lld has no role or content",
                              (long long)i);
    sink k = {out, cap, 0};
    for (int64_t i = 0; i < n; i++) {
        if (i == 0 && t->default_system && !(flags & ATTN_CHAT_CONTINUE) &&
            strcmp(msgs[0].role, "system") != 0) {
            emit(&k, "<|im_start|>system\n");
            emit(&k, t->default_system);
            emit(&k, "<|im_end|>\n");
        }
        emit(&k, "<|im_start|>");
        emit(&k, msgs[i].role);
        emit(&k, "\n");
        emit(&k, msgs[i].content);
        emit(&k, "<|im_end|>\n");
    }
    if (flags & ATTN_CHAT_GENERATION_PROMPT)
        emit(&k, "<|im_start|>assistant\n");
    *len = k.n;
    if (!out || k.n >= cap)
        return out || cap ? attn__fail(ATTN_E_SHAPE,
                                       "the text needs %zu bytes and a NUL; "
                                       "the buffer has %zu",
                                       k.n, cap)
                          : ATTN_OK;
    out[k.n] = '\0';
    return ATTN_OK;
}

attn_status attn_chat_template_load(const char *path,
                                    attn_chat_template **out) {
    if (!out || !path) return attn__fail(ATTN_E_INVALID, "path or out is NULL");
    *out = NULL;
    unsigned char *buf;
    size_t n;
    attn_status st = attn__read_file_max(path, 2, (size_t)1 << 26,
                                         "a tokenizer config", &buf, &n);
    if (st) return st;
    attn__json j;
    st = attn__json_parse((const char *)buf, n, path, &j);
    attn__free(buf);
    if (st) return st;
    const attn__json_node *t =
        j.nodes[0].kind == ATTN__JSON_OBJ
            ? attn__json_get(&j, &j.nodes[0], "chat_template")
            : NULL;
    char q[512];
    attn__escape(path, q, sizeof q);
    if (!t)
        st = attn__fail(ATTN_E_UNSUPPORTED, "%s has no chat_template", q);
    else if (t->kind != ATTN__JSON_STR)
        st = attn__fail(ATTN_E_UNSUPPORTED,
                        "%s: chat_template is not one string (named "
                        "templates are not supported)",
                        q);
    else
        st = attn_chat_template_parse(t->str, strlen(t->str), out);
    attn__json_free(&j);
    return st;
}

/* Loading a BERT-family model: config.json (and the optional tokenizer,
 * sentence-transformers and pooling configs) into attn_bert_config, then
 * every tensor of model.safetensors through the one name table below onto
 * the embeddings and attn's encoder parameter block, refusing checkpoints
 * that do not fit (missing, unknown or misshapen tensors, all named). */
#include "bert.h"
#include "../io/binfile.h"
#include "../io/json.h"
#include "../layers/layers.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where a checkpoint tensor goes: an embedding table of the model, or
 * (per layer) the encoder's parameter of the row's name, found in the
 * encoder's slice table. */
typedef enum {
    DST_WORD,
    DST_POS,
    DST_TYPE,
    DST_LN_G,
    DST_LN_B, /* embeddings */
    DST_LAYER
} dst_kind;

/* Sizes a shape is written in. */
typedef enum { SZ_V, SZ_P, SZ_T, SZ_E, SZ_F, SZ_ONE } size_kind;

/* THE table: checkpoint name (per layer: after "encoder.layer.N.") ->
 * attn parameter, with the expected (rows, cols). */
static const struct {
    const char *name;
    int per_layer;
    dst_kind dst;
    const char *attn; /* per layer: after "layers.N." */
    size_kind rows, cols;
} table[] = {
    {"embeddings.word_embeddings.weight", 0, DST_WORD, "embeddings.word", SZ_V,
     SZ_E},
    {"embeddings.position_embeddings.weight", 0, DST_POS, "embeddings.position",
     SZ_P, SZ_E},
    {"embeddings.token_type_embeddings.weight", 0, DST_TYPE,
     "embeddings.token_type", SZ_T, SZ_E},
    {"embeddings.LayerNorm.weight", 0, DST_LN_G, "embeddings.ln_gamma", SZ_E,
     SZ_ONE},
    {"embeddings.LayerNorm.bias", 0, DST_LN_B, "embeddings.ln_beta", SZ_E,
     SZ_ONE},
    {"attention.self.query.weight", 1, DST_LAYER, "attn.w_q", SZ_E, SZ_E},
    {"attention.self.query.bias", 1, DST_LAYER, "attn.b_q", SZ_E, SZ_ONE},
    {"attention.self.key.weight", 1, DST_LAYER, "attn.w_k", SZ_E, SZ_E},
    {"attention.self.key.bias", 1, DST_LAYER, "attn.b_k", SZ_E, SZ_ONE},
    {"attention.self.value.weight", 1, DST_LAYER, "attn.w_v", SZ_E, SZ_E},
    {"attention.self.value.bias", 1, DST_LAYER, "attn.b_v", SZ_E, SZ_ONE},
    {"attention.output.dense.weight", 1, DST_LAYER, "attn.w_o", SZ_E, SZ_E},
    {"attention.output.dense.bias", 1, DST_LAYER, "attn.b_o", SZ_E, SZ_ONE},
    {"attention.output.LayerNorm.weight", 1, DST_LAYER, "ln1_gamma", SZ_E,
     SZ_ONE},
    {"attention.output.LayerNorm.bias", 1, DST_LAYER, "ln1_beta", SZ_E, SZ_ONE},
    {"intermediate.dense.weight", 1, DST_LAYER, "w_1", SZ_F, SZ_E},
    {"intermediate.dense.bias", 1, DST_LAYER, "b_1", SZ_F, SZ_ONE},
    {"output.dense.weight", 1, DST_LAYER, "w_2", SZ_E, SZ_F},
    {"output.dense.bias", 1, DST_LAYER, "b_2", SZ_E, SZ_ONE},
    {"output.LayerNorm.weight", 1, DST_LAYER, "ln2_gamma", SZ_E, SZ_ONE},
    {"output.LayerNorm.bias", 1, DST_LAYER, "ln2_beta", SZ_E, SZ_ONE},
};
#define NTABLE ((int)(sizeof table / sizeof table[0]))
/* Known names that the model does not use. */
static const char *const unused[] = {
    "embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"};

static int64_t size_of(const attn_bert_config *c, size_kind k) {
    switch (k) {
    case SZ_V: return c->vocab_size;
    case SZ_P: return c->max_position;
    case SZ_T: return c->type_vocab_size;
    case SZ_E: return c->hidden_size;
    case SZ_F: return c->intermediate_size;
    default: return 1;
    }
}

/* ---- configs ------------------------------------------------------------ */

/* A model configuration (config.json and its companions) is a few hundred
 * bytes; label tables make some larger. Past these it is not one, and a
 * hostile file must not cost memory out of proportion. */
#define BERT_MAX_CONFIG ((size_t)1 << 20)
#define BERT_CONFIG_NODES ((int64_t)1 << 16)

static attn_status read_json(const char *dir, const char *file, int optional,
                             attn__json *j, int *found) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    *found = 0;
    if (access(path, F_OK) != 0 && errno == ENOENT) {
        if (optional) return ATTN_OK;
        return attn__fail(ATTN_E_IO,
                          "%s: cannot open (a model folder holds "
                          "config.json, model.safetensors and vocab.txt)",
                          path);
    }
    unsigned char *buf = NULL;
    size_t len = 0;
    attn_status st = attn__read_file_max(path, 0, BERT_MAX_CONFIG,
                                         "a model configuration", &buf, &len);
    const attn__json_limits lim = {BERT_CONFIG_NODES, 0, 0};
    if (!st) st = attn__json_parse_lim((const char *)buf, len, path, &lim, j);
    attn__free(buf);
    if (!st && j->nodes[0].kind != ATTN__JSON_OBJ) {
        attn__json_free(j);
        st = attn__fail(ATTN_E_FORMAT, "%s: not a JSON object", path);
    }
    *found = !st;
    return st;
}

/* An integer member in [lo, hi], or def when absent (def < 0: required). */
static attn_status get_int(const attn__json *j, const char *file,
                           const char *key, int64_t def, int64_t lo, int64_t hi,
                           int64_t *out) {
    const attn__json_node *v = attn__json_get(j, &j->nodes[0], key);
    if (!v || v->kind == ATTN__JSON_NULL) {
        if (def < 0)
            return attn__fail(ATTN_E_FORMAT, "%s: '%s' is missing", file, key);
        *out = def;
        return ATTN_OK;
    }
    if (v->kind != ATTN__JSON_NUM || !v->is_int || v->i64 < lo || v->i64 > hi)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: '%s' must be an integer in [%lld, "
                          "%lld]",
                          file, key, (long long)lo, (long long)hi);
    *out = v->i64;
    return ATTN_OK;
}

/* A boolean member: 1/0, or def when absent or null. */
static int get_bool(const attn__json *j, const char *key, int def) {
    const attn__json_node *v = attn__json_get(j, &j->nodes[0], key);
    return v && v->kind == ATTN__JSON_BOOL ? (int)v->num : def;
}

static attn_status check_str(const attn__json *j, const char *file,
                             const char *key, const char *const *ok, int nok) {
    const attn__json_node *v = attn__json_get(j, &j->nodes[0], key);
    if (!v) return ATTN_OK;
    if (v->kind == ATTN__JSON_STR)
        for (int i = 0; i < nok; i++)
            if (strcmp(v->str, ok[i]) == 0) return ATTN_OK;
    char eb[64];
    return attn__fail(
        ATTN_E_UNSUPPORTED, "%s: %s '%s' is not supported (%s%s%s)", file, key,
        v->kind == ATTN__JSON_STR
            ? attn__escape_bytes(v->str, strlen(v->str), eb, sizeof eb)
            : "?",
        ok[0], nok > 1 ? " or " : "", nok > 1 ? ok[1] : "");
}

static attn_status read_config(const char *dir, attn_bert_config *c) {
    attn__json j;
    int found;
    attn_status st = read_json(dir, "config.json", 0, &j, &found);
    if (st) return st;
    const char *f = "config.json";
    static const char *const bert[] = {"bert"},
                             *const acts[] = {"gelu", "relu"},
                             *const absolute[] = {"absolute"};
    const int64_t big = 1 << 20;
    if ((st = check_str(&j, f, "model_type", bert, 1)) ||
        (st = check_str(&j, f, "hidden_act", acts, 2)) ||
        (st = check_str(&j, f, "position_embedding_type", absolute, 1)) ||
        (st = get_int(&j, f, "vocab_size", -1, 1, 1 << 24, &c->vocab_size)) ||
        (st = get_int(&j, f, "hidden_size", -1, 1, 1 << 16, &c->hidden_size)) ||
        (st = get_int(&j, f, "num_hidden_layers", -1, 1, 1024,
                      &c->num_layers)) ||
        (st = get_int(&j, f, "num_attention_heads", -1, 1, 1024,
                      &c->num_heads)) ||
        (st = get_int(&j, f, "intermediate_size", -1, 1, 1 << 18,
                      &c->intermediate_size)) ||
        (st = get_int(&j, f, "max_position_embeddings", -1, 1, big,
                      &c->max_position)) ||
        (st = get_int(&j, f, "type_vocab_size", 2, 1, 1024,
                      &c->type_vocab_size)) ||
        (st =
             get_int(&j, f, "pad_token_id", 0, 0, 1 << 24, &c->pad_token_id))) {
        attn__json_free(&j);
        return st;
    }
    const attn__json_node *act = attn__json_get(&j, &j.nodes[0], "hidden_act");
    c->activation =
        act && strcmp(act->str, "relu") == 0 ? ATTN_ACT_RELU : ATTN_ACT_GELU;
    const attn__json_node *eps =
        attn__json_get(&j, &j.nodes[0], "layer_norm_eps");
    c->layer_norm_eps = 1e-12;
    if (eps &&
        (eps->kind != ATTN__JSON_NUM || !(eps->num > 0) || eps->num > 1)) {
        attn__json_free(&j);
        return attn__fail(ATTN_E_FORMAT,
                          "%s: layer_norm_eps must be a number "
                          "in (0, 1]",
                          f);
    }
    if (eps) c->layer_norm_eps = eps->num;
    attn__json_free(&j);
    if (c->pad_token_id >= c->vocab_size)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: pad_token_id %lld is outside the vocabulary "
                          "(vocab_size %lld)",
                          f, (long long)c->pad_token_id,
                          (long long)c->vocab_size);
    if (c->hidden_size % c->num_heads)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: hidden_size %lld is not a multiple "
                          "of num_attention_heads %lld",
                          f, (long long)c->hidden_size,
                          (long long)c->num_heads);
    /* the tokenizer's options (BERT uncased when absent) */
    attn_wordpiece_opts_init(&c->tokenizer);
    if ((st = read_json(dir, "tokenizer_config.json", 1, &j, &found)))
        return st;
    if (found) {
        c->tokenizer.lowercase = get_bool(&j, "do_lower_case", 1);
        c->tokenizer.strip_accents = get_bool(&j, "strip_accents", -1);
        c->tokenizer.chinese_chars = get_bool(&j, "tokenize_chinese_chars", 1);
        attn__json_free(&j);
    }
    c->max_seq_length = c->max_position;
    if ((st = read_json(dir, "sentence_bert_config.json", 1, &j, &found)))
        return st;
    if (found) {
        st = get_int(&j, "sentence_bert_config.json", "max_seq_length",
                     c->max_position, 4, c->max_position, &c->max_seq_length);
        attn__json_free(&j);
        if (st) return st;
    }
    if ((st = read_json(dir, "1_Pooling/config.json", 1, &j, &found)))
        return st;
    if (found) {
        int mean = get_bool(&j, "pooling_mode_mean_tokens", 0);
        attn__json_free(&j);
        if (!mean)
            return attn__fail(ATTN_E_UNSUPPORTED, "1_Pooling/config.json: only "
                                                  "mean pooling is supported");
    }
    return ATTN_OK;
}

/* ---- weights ------------------------------------------------------------ */

/* The row of the table for a (prefix-stripped) name, and its layer. */
static int match(const attn_bert_config *c, const char *name, int64_t *layer) {
    *layer = -1;
    const char *pre = "encoder.layer.";
    if (strncmp(name, pre, strlen(pre)) == 0) {
        const char *p = name + strlen(pre);
        int64_t l = 0;
        if (*p < '0' || *p > '9') return -1;
        while (*p >= '0' && *p <= '9' && l < 100000) l = l * 10 + (*p++ - '0');
        if (*p != '.' || l >= c->num_layers) return -1;
        for (int k = 0; k < NTABLE; k++)
            if (table[k].per_layer && strcmp(p + 1, table[k].name) == 0) {
                *layer = l;
                return k;
            }
        return -1;
    }
    for (int k = 0; k < NTABLE; k++)
        if (!table[k].per_layer && strcmp(name, table[k].name) == 0) return k;
    return -1;
}

/* The floats of table row k, named an in the model (its slice name for
 * a per-layer row); NULL when the encoder has no such slice of n floats. */
static float *dst_of(attn_bert *m, const attn_param_slice *sl, int64_t nsl,
                     int k, const char *an, int64_t n) {
    switch (table[k].dst) {
    case DST_WORD: return m->word;
    case DST_POS: return m->pos;
    case DST_TYPE: return m->type;
    case DST_LN_G: return m->ln_g;
    case DST_LN_B: return m->ln_b;
    default: break;
    }
    for (int64_t i = 0; i < nsl; i++)
        if (strcmp(sl[i].name, an) == 0)
            return sl[i].shape[0] * sl[i].shape[1] == n
                       ? m->params + sl[i].offset
                       : NULL;
    return NULL;
}

/* Appends "name" to a problem list of the message, up to its room. */
static void note(char *list, size_t cap, int *count, const char *name) {
    char eb[96];
    size_t n = strlen(list);
    if (++*count <= 4 && n + 100 < cap)
        snprintf(list + n, cap - n, "%s'%s'", n ? ", " : "",
                 attn__escape_bytes(name, strlen(name), eb, sizeof eb));
}

static attn_status load_weights(attn_bert *m, const char *dir) {
    const attn_bert_config *c = &m->cfg;
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    attn_safetensors *st;
    attn_status s = attn_safetensors_open(path, &st);
    if (s) return s;
    const int64_t nt = attn_safetensors_count(st);
    const int64_t nslots = NTABLE * (c->num_layers + 1);
    unsigned char *seen = attn__alloc((size_t)nslots, 1, "seen");
    m->map = attn__alloc((size_t)nt + 1, sizeof *m->map, "mapping");
    size_t names = 0;
    for (int64_t i = 0; i < nt; i++) {
        attn_st_tensor t;
        attn_safetensors_get(st, i, &t);
        names += strlen(t.name) + 64;
    }
    m->names = attn__alloc(names + 1, 1, "mapping names");
    attn_param_slice *sl = NULL; /* the encoder's: where each layer row goes */
    int64_t nsl = 0;
    if (!seen || !m->map || !m->names ||
        (s = attn__slices_alloc(attn__encoder_slices, &m->enc, &sl, &nsl))) {
        attn__free(seen);
        attn__free(sl);
        attn_safetensors_close(st);
        return s ? s : ATTN_E_NOMEM;
    }
    memset(seen, 0, (size_t)nslots);
    char unexpected[320] = "", shapes[320] = "", missing[320] = "";
    int nun = 0, nshape = 0, nmiss = 0;
    size_t used = 0;
    for (int64_t i = 0; i < nt && !s; i++) {
        attn_st_tensor t;
        attn_safetensors_get(st, i, &t);
        const char *name =
            strncmp(t.name, "bert.", 5) == 0 ? t.name + 5 : t.name;
        attn_bert_mapped *row = &m->map[m->nmap++];
        row->checkpoint = strcpy(m->names + used, t.name);
        used += strlen(t.name) + 1;
        row->dtype = t.dtype;
        row->shape[0] = t.ndim > 0 ? t.shape[0] : 1;
        row->shape[1] = t.ndim > 1 ? t.shape[1] : 1;
        row->attn = "";
        int64_t layer;
        int k = match(c, name, &layer);
        if (k < 0) {
            int known = 0;
            for (size_t u = 0; u < sizeof unused / sizeof unused[0]; u++)
                known |= strcmp(name, unused[u]) == 0;
            if (!known) note(unexpected, sizeof unexpected, &nun, t.name);
            continue;
        }
        int64_t slot = (layer + 1) * NTABLE + k;
        if (seen[slot]++) continue; /* "bert.x" and "x" both: the first wins */
        const int64_t rows = size_of(c, table[k].rows),
                      cols = size_of(c, table[k].cols);
        int fits = cols == 1 ? (t.ndim == 1 && t.shape[0] == rows)
                             : (t.ndim == 2 && t.shape[0] == rows &&
                                t.shape[1] == cols);
        if (!fits || !attn__is_float_dtype(t.dtype)) {
            char what[160];
            snprintf(what, sizeof what,
                     "%s (%s, %lld elements; expected %lld x %lld)", t.name,
                     attn_dtype_name(t.dtype), (long long)t.numel,
                     (long long)rows, (long long)cols);
            note(shapes, sizeof shapes, &nshape, what);
            continue;
        }
        char *an = m->names + used;
        if (layer >= 0)
            snprintf(an, 64, "layers.%lld.%s", (long long)layer, table[k].attn);
        else
            snprintf(an, 64, "%s", table[k].attn);
        row->attn = an;
        used += strlen(an) + 1;
        float *dst = dst_of(m, sl, nsl, k, an, rows * cols);
        s = dst ? attn_st_tensor_to_f32(&t, dst, rows * cols)
                : attn__fail(ATTN_E_INVALID,
                             "the encoder has no parameter %s of %lld floats",
                             an, (long long)(rows * cols));
    }
    for (int64_t slot = 0; slot < nslots && !s; slot++) {
        int k = (int)(slot % NTABLE);
        int64_t layer = slot / NTABLE - 1;
        if ((layer >= 0) != table[k].per_layer || seen[slot]) continue;
        char nm[160];
        if (layer >= 0)
            snprintf(nm, sizeof nm, "encoder.layer.%lld.%s", (long long)layer,
                     table[k].name);
        else
            snprintf(nm, sizeof nm, "%s", table[k].name);
        note(missing, sizeof missing, &nmiss, nm);
    }
    attn__free(seen);
    attn__free(sl);
    attn_safetensors_close(st);
    if (s) return s;
    if (nmiss || nun || nshape)
        return attn__fail(
            ATTN_E_FORMAT,
            "%s does not fit config.json: %d missing "
            "[%s%s], %d unexpected [%s%s], %d of the wrong shape or "
            "dtype [%s%s]",
            path, nmiss, missing, nmiss > 4 ? ", ..." : "", nun, unexpected,
            nun > 4 ? ", ..." : "", nshape, shapes, nshape > 4 ? ", ..." : "");
    return ATTN_OK;
}

attn_status attn_bert_load(const char *dir, attn_bert **out) {
    if (!out) return attn__fail(ATTN_E_INVALID, "out is NULL");
    *out = NULL;
    if (!dir) return attn__fail(ATTN_E_INVALID, "dir is NULL");
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return attn__fail(ATTN_E_IO,
                          "%s: not a folder (a model folder holds "
                          "config.json, model.safetensors and vocab.txt)",
                          dir);
    attn_bert *m = attn__alloc(1, sizeof *m, "model");
    if (!m) return ATTN_E_NOMEM;
    memset(m, 0, sizeof *m);
    atomic_flag_clear(&m->buf_busy);
    attn_status st = read_config(dir, &m->cfg);
    const attn_bert_config *c = &m->cfg;
    if (!st) {
        attn_encoder_config_init(&m->enc);
        m->enc.num_layers = c->num_layers;
        m->enc.d_model = c->hidden_size;
        m->enc.num_heads = c->num_heads;
        m->enc.dim_feedforward = c->intermediate_size;
        m->enc.activation = c->activation;
        m->enc.norm_first = 0;
        m->enc.layer_norm_eps = c->layer_norm_eps;
        const int64_t E = c->hidden_size;
        int64_t np = attn_encoder_param_count(&m->enc);
        size_t ne = attn__size3(
            c->vocab_size + c->max_position + c->type_vocab_size + 2, E, 1);
        if (!np || !ne)
            st = attn__fail(ATTN_E_NOMEM, "model sizes overflow");
        else if (!(m->params = attn__alloc((size_t)np, sizeof(float),
                                           "encoder parameters")) ||
                 !(m->word = attn__alloc(ne, sizeof(float), "embeddings")))
            st = ATTN_E_NOMEM;
        else {
            m->pos = m->word + c->vocab_size * E;
            m->type = m->pos + c->max_position * E;
            m->ln_g = m->type + c->type_vocab_size * E;
            m->ln_b = m->ln_g + E;
        }
    }
    if (!st) st = load_weights(m, dir);
    if (!st) attn__bert_pack(m);
    if (!st) {
        char path[4096];
        snprintf(path, sizeof path, "%s/vocab.txt", dir);
        st = attn_wordpiece_load(path, &c->tokenizer, &m->tok);
        if (!st && attn_wordpiece_vocab_size(m->tok) > c->vocab_size)
            st = attn__fail(ATTN_E_FORMAT,
                            "%s holds %lld tokens but the model "
                            "embeds %lld",
                            path, (long long)attn_wordpiece_vocab_size(m->tok),
                            (long long)c->vocab_size);
    }
    if (st) {
        attn_bert_free(m);
        return st;
    }
    *out = m;
    return ATTN_OK;
}

void attn_bert_free(attn_bert *m) {
    if (!m) return;
    attn_wordpiece_free(m->tok);
    attn__packed_free(m->packed);
    ATTN__FREE_ALL(m->buf, m->params, m->word, m->map, m->names, m);
}

const attn_bert_config *attn_bert_get_config(const attn_bert *m) {
    return m ? &m->cfg : NULL;
}

const attn_wordpiece *attn_bert_tokenizer(const attn_bert *m) {
    return m ? m->tok : NULL;
}

int64_t attn_bert_param_count(const attn_bert *m) {
    if (!m) return 0;
    const attn_bert_config *c = &m->cfg;
    return attn_encoder_param_count(&m->enc) +
           (c->vocab_size + c->max_position + c->type_vocab_size + 2) *
               c->hidden_size;
}

int64_t attn_bert_mapped_count(const attn_bert *m) { return m ? m->nmap : 0; }

attn_status attn_bert_mapped_get(const attn_bert *m, int64_t i,
                                 attn_bert_mapped *row) {
    if (!m || !row)
        return attn__fail(ATTN_E_INVALID, "%s is NULL", m ? "row" : "m");
    if (i < 0 || i >= m->nmap)
        return attn__fail(ATTN_E_INVALID, "row %lld is outside [0, %lld)",
                          (long long)i, (long long)m->nmap);
    *row = m->map[i];
    return ATTN_OK;
}

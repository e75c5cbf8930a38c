/* Loading a Llama-family model (Llama, Mistral, Qwen2) from a
 * transformers folder: config.json into attn_llama_config and the decoder
 * config, then every tensor of model.safetensors (or of the shards that
 * model.safetensors.index.json names) through the one name table below
 * onto the embeddings, the decoder's parameter block and the head. */
#include "llama.h"
#include "attn_tokenizer.h"
#include "../io/binfile.h"
#include "../io/json.h"

#include <string.h>
#include <sys/stat.h>

/* ---- config.json ------------------------------------------------------- */

static attn_status read_json_file(const char *path, attn__json *j) {
    unsigned char *buf;
    size_t n;
    attn_status st = attn__read_file(path, 2, "a JSON file", &buf, &n);
    if (st) return st;
    if (n > (1u << 26)) {
        attn__free(buf);
        return attn__bad_file(path, "over 64 MiB: not a config");
    }
    st = attn__json_parse((const char *)buf, n, path, j);
    attn__free(buf);
    if (!st && j->nodes[0].kind != ATTN__JSON_OBJ) {
        attn__json_free(j);
        return attn__bad_file(path, "not a JSON object");
    }
    return st;
}

static const attn__json_node *
member(const attn__json *j, const attn__json_node *obj, const char *key) {
    const attn__json_node *v = obj ? attn__json_get(j, obj, key) : NULL;
    return v && v->kind != ATTN__JSON_NULL ? v : NULL;
}

static attn_status get_i64(const attn__json *j, const attn__json_node *obj,
                           const char *key, int64_t def, int64_t lo, int64_t hi,
                           int64_t *out) {
    const attn__json_node *v = member(j, obj, key);
    if (!v) {
        if (def == INT64_MIN)
            return attn__fail(ATTN_E_FORMAT, "config.json: '%s' is missing",
                              key);
        *out = def;
        return ATTN_OK;
    }
    if (v->kind != ATTN__JSON_NUM || !v->is_int || v->i64 < lo || v->i64 > hi)
        return attn__fail(ATTN_E_FORMAT,
                          "config.json: '%s' must be an integer in [%lld, "
                          "%lld]",
                          key, (long long)lo, (long long)hi);
    *out = v->i64;
    return ATTN_OK;
}

static attn_status get_f64(const attn__json *j, const attn__json_node *obj,
                           const char *key, double def, double lo, double hi,
                           double *out) {
    const attn__json_node *v = member(j, obj, key);
    if (!v) {
        *out = def;
        return ATTN_OK;
    }
    if (v->kind != ATTN__JSON_NUM || !(v->num >= lo) || !(v->num <= hi))
        return attn__fail(ATTN_E_FORMAT,
                          "config.json: '%s' must be a number in [%g, %g]", key,
                          lo, hi);
    *out = v->num;
    return ATTN_OK;
}

static const char *get_str(const attn__json *j, const attn__json_node *obj,
                           const char *key) {
    const attn__json_node *v = member(j, obj, key);
    return v && v->kind == ATTN__JSON_STR ? v->str : NULL;
}

/* A token id, or the first of a list; -1 when absent. */
static int64_t token_id(const attn__json *j, const char *key) {
    const attn__json_node *v = member(j, &j->nodes[0], key);
    if (v && v->kind == ATTN__JSON_ARR && v->child >= 0)
        v = &j->nodes[v->child];
    return v && v->kind == ATTN__JSON_NUM && v->is_int && v->i64 >= 0 ? v->i64
                                                                      : -1;
}

/* rope_theta and the scaling: at the top level and in rope_scaling (older
 * transformers) or inside rope_parameters (newer). */
static attn_status read_rope(const attn__json *j, attn_rope *r) {
    const attn__json_node *root = &j->nodes[0];
    const attn__json_node *rp = member(j, root, "rope_parameters");
    const attn__json_node *rs = member(j, root, "rope_scaling");
    if (rp && rp->kind != ATTN__JSON_OBJ) rp = NULL;
    if (rs && rs->kind != ATTN__JSON_OBJ)
        return attn__fail(ATTN_E_FORMAT,
                          "config.json: rope_scaling is not an object");
    attn_rope_init(r);
    attn_status st;
    if ((st = get_f64(j, root, "rope_theta", 10000.0, 1.0, 1e300, &r->theta)))
        return st;
    if (rp &&
        (st = get_f64(j, rp, "rope_theta", r->theta, 1.0, 1e300, &r->theta)))
        return st;
    const attn__json_node *sc = rs ? rs : rp;
    const char *type = sc ? get_str(j, sc, "rope_type") : NULL;
    if (sc && !type) type = get_str(j, sc, "type");
    double prf = 1.0;
    if ((st = get_f64(j, root, "partial_rotary_factor", 1.0, 0.0, 1.0, &prf)))
        return st;
    if (prf != 1.0)
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "config.json: partial_rotary_factor %g: the Llama "
                          "family rotates whole heads",
                          prf);
    if (!type || strcmp(type, "default") == 0) return ATTN_OK;
    if (strcmp(type, "linear") == 0) {
        r->scaling = ATTN_ROPE_SCALING_LINEAR;
        return get_f64(j, sc, "factor", 1.0, 1.0, 1e9, &r->factor);
    }
    if (strcmp(type, "llama3") == 0) {
        r->scaling = ATTN_ROPE_SCALING_LLAMA3;
        if ((st = get_f64(j, sc, "factor", 8.0, 1.0, 1e9, &r->factor)) ||
            (st = get_f64(j, sc, "low_freq_factor", 1.0, 1e-9, 1e9,
                          &r->low_freq_factor)) ||
            (st = get_f64(j, sc, "high_freq_factor", 4.0, 1e-9, 1e9,
                          &r->high_freq_factor)) ||
            (st = get_f64(j, sc, "original_max_position_embeddings", 8192.0,
                          1.0, 1e12, &r->original_max_position)))
            return st;
        return ATTN_OK;
    }
    char eb[64];
    return attn__fail(ATTN_E_UNSUPPORTED,
                      "config.json: rope type '%s' is not supported (default, "
                      "linear or llama3)",
                      attn__escape_bytes(type, strlen(type), eb, sizeof eb));
}

static attn_status read_config(const char *dir, attn_llama_config *c) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    attn__json j;
    attn_status st = read_json_file(path, &j);
    if (st) return st;
    const attn__json_node *root = &j.nodes[0];
    memset(c, 0, sizeof *c);
    const char *type = get_str(&j, root, "model_type");
    char eb[64];
    if (!type || (strcmp(type, "llama") && strcmp(type, "mistral") &&
                  strcmp(type, "qwen2"))) {
        st = attn__fail(
            ATTN_E_UNSUPPORTED,
            "config.json: model_type '%s' is not supported "
            "(llama, mistral or qwen2)",
            type ? attn__escape_bytes(type, strlen(type), eb, sizeof eb)
                 : "(missing)");
        attn__json_free(&j);
        return st;
    }
    snprintf(c->model_type, sizeof c->model_type, "%s", type);
    const char *act = get_str(&j, root, "hidden_act");
    const int64_t M = INT64_MIN;
    int64_t head_dim = 0;
    if (act && strcmp(act, "silu") != 0)
        st = attn__fail(ATTN_E_UNSUPPORTED,
                        "config.json: hidden_act '%s' is not supported (silu)",
                        attn__escape_bytes(act, strlen(act), eb, sizeof eb));
    if (!st)
        st = get_i64(&j, root, "vocab_size", M, 1, 1 << 24, &c->vocab_size);
    if (!st)
        st = get_i64(&j, root, "hidden_size", M, 1, 1 << 16, &c->hidden_size);
    if (!st)
        st = get_i64(&j, root, "num_hidden_layers", M, 1, 1024, &c->num_layers);
    if (!st)
        st =
            get_i64(&j, root, "num_attention_heads", M, 1, 1024, &c->num_heads);
    if (!st)
        st = get_i64(&j, root, "num_key_value_heads", c->num_heads, 1, 1024,
                     &c->num_kv_heads);
    if (!st)
        st = get_i64(&j, root, "intermediate_size", M, 1, 1 << 20,
                     &c->intermediate_size);
    if (!st)
        st = get_i64(&j, root, "max_position_embeddings", 4096, 1, 1 << 24,
                     &c->max_position);
    if (!st) st = get_i64(&j, root, "head_dim", 0, 0, 1 << 16, &head_dim);
    if (!st)
        st = get_f64(&j, root, "rms_norm_eps", 1e-6, 1e-30, 1.0,
                     &c->rms_norm_eps);
    if (!st) st = read_rope(&j, &c->rope);
    if (!st && strcmp(type, "mistral") == 0)
        st = get_i64(&j, root, "sliding_window", 0, 0, INT64_MAX / 4,
                     &c->sliding_window);
    if (!st && strcmp(type, "qwen2") == 0) {
        const attn__json_node *u = member(&j, root, "use_sliding_window");
        if (u && u->kind == ATTN__JSON_BOOL && u->num != 0)
            st = attn__fail(ATTN_E_UNSUPPORTED,
                            "config.json: qwen2 use_sliding_window (a window "
                            "on some layers only) is not supported");
        c->attention_bias = 1;
    }
    if (!st && strcmp(type, "qwen2") != 0) {
        const attn__json_node *ab = member(&j, root, "attention_bias");
        const attn__json_node *mb = member(&j, root, "mlp_bias");
        if ((ab && ab->kind == ATTN__JSON_BOOL && ab->num != 0) ||
            (mb && mb->kind == ATTN__JSON_BOOL && mb->num != 0))
            st = attn__fail(ATTN_E_UNSUPPORTED,
                            "config.json: attention_bias / mlp_bias are not "
                            "supported for %s",
                            c->model_type);
    }
    if (!st) {
        const attn__json_node *t = member(&j, root, "tie_word_embeddings");
        c->tie_word_embeddings = t && t->kind == ATTN__JSON_BOOL ? (int)t->num
                                 : strcmp(type, "qwen2") == 0    ? 0
                                                                 : 0;
        c->bos_token_id = token_id(&j, "bos_token_id");
        c->eos_token_id = token_id(&j, "eos_token_id");
    }
    attn__json_free(&j);
    if (st) return st;
    if (c->hidden_size % c->num_heads || c->num_heads % c->num_kv_heads)
        return attn__fail(ATTN_E_FORMAT,
                          "config.json: hidden_size %lld, num_attention_heads "
                          "%lld and num_key_value_heads %lld do not divide",
                          (long long)c->hidden_size, (long long)c->num_heads,
                          (long long)c->num_kv_heads);
    if (head_dim && head_dim != c->hidden_size / c->num_heads)
        return attn__fail(ATTN_E_UNSUPPORTED,
                          "config.json: head_dim %lld is not hidden_size / "
                          "num_attention_heads = %lld",
                          (long long)head_dim,
                          (long long)(c->hidden_size / c->num_heads));
    return attn_rope_check(&c->rope, c->hidden_size / c->num_heads);
}

/* ---- the name table ------------------------------------------------------ */

typedef enum { SZ_V, SZ_E, SZ_KV, SZ_F, SZ_ONE } size_kind;

/* THE table: checkpoint name in a transformers folder (per layer: after
 * "model.layers.N.") and in a GGUF file (per layer: after "blk.N.") ->
 * attn parameter and the expected (rows, cols). */
static const struct {
    const char *name;
    const char *gguf;
    int per_layer;
    attn__llama_dst dst;
    size_kind rows, cols;
} table[] = {
    {"model.embed_tokens.weight", "token_embd.weight", 0, DST_EMBED, SZ_V,
     SZ_E},
    {"model.norm.weight", "output_norm.weight", 0, DST_NORM, SZ_E, SZ_ONE},
    {"lm_head.weight", "output.weight", 0, DST_HEAD, SZ_V, SZ_E},
    {"self_attn.q_proj.weight", "attn_q.weight", 1, DST_WQ, SZ_E, SZ_E},
    {"self_attn.q_proj.bias", "attn_q.bias", 1, DST_BQ, SZ_E, SZ_ONE},
    {"self_attn.k_proj.weight", "attn_k.weight", 1, DST_WK, SZ_KV, SZ_E},
    {"self_attn.k_proj.bias", "attn_k.bias", 1, DST_BK, SZ_KV, SZ_ONE},
    {"self_attn.v_proj.weight", "attn_v.weight", 1, DST_WV, SZ_KV, SZ_E},
    {"self_attn.v_proj.bias", "attn_v.bias", 1, DST_BV, SZ_KV, SZ_ONE},
    {"self_attn.o_proj.weight", "attn_output.weight", 1, DST_WO, SZ_E, SZ_E},
    {"input_layernorm.weight", "attn_norm.weight", 1, DST_LN1, SZ_E, SZ_ONE},
    {"post_attention_layernorm.weight", "ffn_norm.weight", 1, DST_LN3, SZ_E,
     SZ_ONE},
    {"mlp.gate_proj.weight", "ffn_gate.weight", 1, DST_GATE, SZ_F, SZ_E},
    {"mlp.up_proj.weight", "ffn_up.weight", 1, DST_UP, SZ_F, SZ_E},
    {"mlp.down_proj.weight", "ffn_down.weight", 1, DST_DOWN, SZ_E, SZ_F},
};
#define NTABLE ((int)(sizeof table / sizeof table[0]))

static int64_t size_of(const attn_llama_config *c, size_kind k) {
    switch (k) {
    case SZ_V: return c->vocab_size;
    case SZ_E: return c->hidden_size;
    case SZ_KV: return c->num_kv_heads * (c->hidden_size / c->num_heads);
    case SZ_F: return c->intermediate_size;
    default: return 1;
    }
}

/* Whether row k of the table is part of this model. */
static int wanted(const attn_llama_config *c, int k) {
    attn__llama_dst d = table[k].dst;
    if (d == DST_HEAD) return !c->tie_word_embeddings;
    if (d == DST_BQ || d == DST_BK || d == DST_BV) return c->attention_bias;
    return 1;
}

static const char *col(int k, int gguf) {
    return gguf ? table[k].gguf : table[k].name;
}

/* The row of the table for a name (gguf: the file's names), and its layer
 * (-1: not per layer). */
static int match(const attn_llama_config *c, const char *name, int gguf,
                 int64_t *layer) {
    *layer = -1;
    const char *pre = gguf ? "blk." : "model.layers.";
    if (strncmp(name, pre, strlen(pre)) == 0) {
        const char *p = name + strlen(pre);
        int64_t l = 0;
        if (*p < '0' || *p > '9') return -1;
        while (*p >= '0' && *p <= '9' && l < 100000) l = l * 10 + (*p++ - '0');
        if (*p != '.' || l >= c->num_layers) return -1;
        for (int k = 0; k < NTABLE; k++)
            if (table[k].per_layer && strcmp(p + 1, col(k, gguf)) == 0) {
                *layer = l;
                return wanted(c, k) ? k : -1;
            }
        return -1;
    }
    for (int k = 0; k < NTABLE; k++)
        if (!table[k].per_layer && strcmp(name, col(k, gguf)) == 0)
            return wanted(c, k) ? k : -1;
    return -1;
}

static float *dst_of(attn_llama *m, attn__llama_dst d, int64_t layer) {
    attn_decoder_layer_params P;
    if (layer >= 0) attn_decoder_layer_view(&m->dec, m->params, layer, &P);
    float *g = NULL, *b = NULL;
    switch (d) {
    case DST_EMBED: return m->embed;
    case DST_HEAD: return m->own_head;
    case DST_NORM:
        attn_decoder_final_norm_view(&m->dec, m->params, &g, &b);
        return g;
    case DST_WQ: return P.self_attn.w_q;
    case DST_BQ: return P.self_attn.b_q;
    case DST_WK: return P.self_attn.w_k;
    case DST_BK: return P.self_attn.b_k;
    case DST_WV: return P.self_attn.w_v;
    case DST_BV: return P.self_attn.b_v;
    case DST_WO: return P.self_attn.w_o;
    case DST_LN1: return P.ln1_gamma;
    case DST_LN3: return P.ln3_gamma;
    case DST_GATE: return P.w_1; /* rows 0 .. F-1 of w_1 */
    case DST_UP: return P.w_1 + m->cfg.intermediate_size * m->cfg.hidden_size;
    case DST_DOWN: return P.w_2;
    }
    return NULL;
}

/* Slots of seen[]: one per table row and layer (and one for the model). */
int64_t attn__llama_slots(const attn_llama *m) {
    return (int64_t)NTABLE * (m->cfg.num_layers + 1);
}

attn_status attn__llama_place(attn_llama *m, const char *path, const char *name,
                              int gguf, int ndim, const int64_t *shape,
                              uint8_t *seen, attn__llama_slot *out) {
    const attn_llama_config *c = &m->cfg;
    char eb[96];
    int64_t layer;
    int k = match(c, name, gguf, &layer);
    if (k < 0)
        return attn__fail(
            ATTN_E_FORMAT,
            "%s: tensor '%s' is not part of a %s model of this config", path,
            attn__escape_bytes(name, strlen(name), eb, sizeof eb),
            c->model_type);
    const int64_t rows = size_of(c, table[k].rows),
                  cols = size_of(c, table[k].cols);
    const int rank = table[k].cols == SZ_ONE ? 1 : 2;
    if (ndim != rank || shape[0] != rows || (rank == 2 && shape[1] != cols))
        return attn__fail(
            ATTN_E_FORMAT,
            "%s: tensor '%s' has %d dims (%lld, %lld) but the "
            "config needs (%lld%s%lld)",
            path, attn__escape_bytes(name, strlen(name), eb, sizeof eb), ndim,
            (long long)(ndim > 0 ? shape[0] : 0),
            (long long)(ndim > 1 ? shape[1] : 0), (long long)rows,
            rank == 2 ? ", " : "", rank == 2 ? (long long)cols : 0LL);
    const int64_t slot = k * (c->num_layers + 1) + layer + 1;
    if (seen[slot])
        return attn__fail(
            ATTN_E_FORMAT, "%s: tensor '%s' is given twice", path,
            attn__escape_bytes(name, strlen(name), eb, sizeof eb));
    seen[slot] = 1;
    out->dst = dst_of(m, table[k].dst, layer);
    out->kind = table[k].dst;
    out->layer = layer;
    out->rows = rows;
    out->cols = rank == 2 ? cols : 1;
    return ATTN_OK;
}

/* One file's tensors onto the model; seen[] marks the slots filled. */
static attn_status load_file(attn_llama *m, const char *path, uint8_t *seen) {
    attn_safetensors *st;
    attn_status s = attn_safetensors_open(path, &st);
    if (s) return s;
    const int64_t nt = attn_safetensors_count(st);
    for (int64_t i = 0; i < nt && !s; i++) {
        attn_st_tensor t;
        if ((s = attn_safetensors_get(st, i, &t))) break;
        /* rotary tables some checkpoints store are recomputed here */
        if (strstr(t.name, "rotary_emb.inv_freq")) continue;
        attn__llama_slot at;
        s = attn__llama_place(m, path, t.name, 0, t.ndim, t.shape, seen, &at);
        if (s) break;
        if (i == 0 || t.dtype != ATTN_F32) m->cfg.stored_dtype = t.dtype;
        s = attn_st_tensor_to_f32(&t, at.dst, t.numel);
    }
    attn_safetensors_close(st);
    return s;
}

/* The shard files of an index's weight_map, each once, into files (a
 * NUL-separated list of count names). */
static attn_status read_index(const char *dir, char **files, int64_t *count) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    attn__json j;
    attn_status st = read_json_file(path, &j);
    if (st) return st;
    const attn__json_node *wm = member(&j, &j.nodes[0], "weight_map");
    if (!wm || wm->kind != ATTN__JSON_OBJ) {
        attn__json_free(&j);
        return attn__bad_file(path, "has no weight_map object");
    }
    size_t cap = 1;
    for (int64_t c = wm->child; c >= 0; c = j.nodes[c].next)
        if (j.nodes[c].kind == ATTN__JSON_STR)
            cap += strlen(j.nodes[c].str) + 1;
    char *list = attn__alloc(cap, 1, "shard names");
    if (!list) {
        attn__json_free(&j);
        return ATTN_E_NOMEM;
    }
    size_t used = 0;
    int64_t n = 0;
    char eb[96];
    for (int64_t c = wm->child; c >= 0 && !st; c = j.nodes[c].next) {
        const char *f = j.nodes[c].str;
        if (j.nodes[c].kind != ATTN__JSON_STR || strchr(f, '/') || !*f ||
            strcmp(f, "..") == 0 || strcmp(f, ".") == 0) {
            st =
                attn__fail(ATTN_E_FORMAT,
                           "%s: weight_map entry '%s' is not a file name in "
                           "the folder",
                           path,
                           j.nodes[c].kind == ATTN__JSON_STR
                               ? attn__escape_bytes(f, strlen(f), eb, sizeof eb)
                               : "?");
            break;
        }
        int dup = 0;
        for (size_t p = 0; p < used; p += strlen(list + p) + 1)
            dup |= strcmp(list + p, f) == 0;
        if (dup) continue;
        memcpy(list + used, f, strlen(f) + 1);
        used += strlen(f) + 1;
        n++;
    }
    attn__json_free(&j);
    if (st || n == 0) {
        attn__free(list);
        return st ? st : attn__bad_file(path, "names no shard");
    }
    *files = list;
    *count = n;
    return ATTN_OK;
}

attn_status attn__llama_check_seen(const attn_llama *m, const char *label,
                                   const uint8_t *seen, int gguf) {
    const attn_llama_config *c = &m->cfg;
    for (int k = 0; k < NTABLE; k++) {
        if (!wanted(c, k)) continue;
        for (int64_t l = table[k].per_layer ? 0 : -1;
             l < (table[k].per_layer ? c->num_layers : 0); l++) {
            if (seen[k * (c->num_layers + 1) + l + 1]) continue;
            if (table[k].per_layer)
                return attn__fail(ATTN_E_FORMAT,
                                  "%s: tensor '%s%lld.%s' is missing", label,
                                  gguf ? "blk." : "model.layers.", (long long)l,
                                  col(k, gguf));
            return attn__fail(ATTN_E_FORMAT, "%s: tensor '%s' is missing%s",
                              label, col(k, gguf),
                              table[k].dst == DST_HEAD && !gguf
                                  ? " (tie_word_embeddings is false)"
                                  : "");
        }
    }
    return ATTN_OK;
}

static attn_status load_weights(attn_llama *m, const char *dir) {
    const int64_t nslots = attn__llama_slots(m);
    uint8_t *seen = attn__alloc((size_t)nslots, 1, "tensor table");
    if (!seen) return ATTN_E_NOMEM;
    memset(seen, 0, (size_t)nslots);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *probe = fopen(path, "rb");
    attn_status st;
    if (probe) {
        fclose(probe);
        st = load_file(m, path, seen);
    } else {
        char *files = NULL;
        int64_t n = 0;
        st = read_index(dir, &files, &n);
        if (st == ATTN_E_IO)
            st = attn__fail(ATTN_E_IO,
                            "%s: neither model.safetensors nor "
                            "model.safetensors.index.json can be opened",
                            dir);
        const char *f = files;
        for (int64_t i = 0; i < n && !st; i++, f += strlen(f) + 1) {
            snprintf(path, sizeof path, "%s/%s", dir, f);
            st = load_file(m, path, seen);
        }
        attn__free(files);
    }
    if (!st) st = attn__llama_check_seen(m, dir, seen, 0);
    attn__free(seen);
    return st;
}

static void decoder_of(const attn_llama_config *c, attn_decoder_config *d) {
    attn_decoder_config_init(d);
    d->num_layers = c->num_layers;
    d->d_model = c->hidden_size;
    d->num_heads = c->num_heads;
    d->num_kv_heads = c->num_kv_heads;
    d->dim_feedforward = c->intermediate_size;
    d->cross = 0;
    d->activation = ATTN_ACT_SWIGLU;
    d->norm_first = 1;
    d->final_norm = 1;
    d->layer_norm_eps = c->rms_norm_eps;
    d->norm = ATTN_NORM_RMS;
    d->attn_no_bias = 0; /* b_o is zero; b_q, b_k, b_v Qwen2's or zero */
    d->rope = c->rope;
    d->sliding_window = c->sliding_window;
}

attn_status attn__llama_alloc(attn_llama *m) {
    decoder_of(&m->cfg, &m->dec);
    attn_status st = attn_decoder_check(&m->dec);
    if (st) return st;
    const int64_t np = attn_decoder_param_count(&m->dec);
    const int64_t VE = m->cfg.vocab_size * m->cfg.hidden_size;
    if (!np) return attn__fail(ATTN_E_NOMEM, "the model is too large");
    m->params = attn__alloc((size_t)np, sizeof(float), "parameters");
    m->embed =
        m->params ? attn__alloc((size_t)VE, sizeof(float), "embeddings") : NULL;
    if (m->embed && !m->cfg.tie_word_embeddings)
        m->own_head = attn__alloc((size_t)VE, sizeof(float), "lm_head");
    if (!m->embed || (!m->cfg.tie_word_embeddings && !m->own_head))
        return ATTN_E_NOMEM;
    /* what the checkpoint does not hold is zero: every beta, the FFN
     * biases, b_o, and the q/k/v biases of llama and mistral */
    memset(m->params, 0, (size_t)np * sizeof(float));
    m->head = m->cfg.tie_word_embeddings ? m->embed : m->own_head;
    return ATTN_OK;
}

/* Whether path is a regular file that starts as a GGUF file does. */
static int is_gguf_file(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char magic[4] = {0};
    const size_t n = fread(magic, 1, 4, f);
    fclose(f);
    return n == 4 && memcmp(magic, "GGUF", 4) == 0;
}

attn_status attn_llama_load(const char *path, attn_llama **out) {
    if (!out) return attn__fail(ATTN_E_INVALID, "out is NULL");
    *out = NULL;
    if (!path) return attn__fail(ATTN_E_INVALID, "path is NULL");
    if (strlen(path) > 3000)
        return attn__fail(ATTN_E_INVALID, "the path is too long");
    attn_llama *m = attn__alloc(1, sizeof *m, "model");
    if (!m) return ATTN_E_NOMEM;
    memset(m, 0, sizeof *m);
    attn_status st;
    if (is_gguf_file(path)) {
        st = attn__llama_load_gguf(m, path);
    } else {
        st = read_config(path, &m->cfg);
        if (!st) st = attn__llama_alloc(m);
        if (!st) {
            m->cfg.stored_dtype = ATTN_F32;
            st = load_weights(m, path);
        }
        if (!st) { /* the tokenizer, when the folder has one */
            char tp[4096];
            snprintf(tp, sizeof tp, "%s/tokenizer.json", path);
            FILE *f = fopen(tp, "rb");
            if (f) {
                fclose(f);
                st = attn_bpe_load(tp, &m->tok);
            }
        }
    }
    if (st) {
        attn_llama_free(m);
        return st;
    }
    *out = m;
    return ATTN_OK;
}

void attn_llama_free(attn_llama *m) {
    if (!m) return;
    attn_bpe_free(m->tok);
    attn__llama_quant_free(m->quant);
    ATTN__FREE_ALL(m->params, m->embed, m->own_head, m->chat_template, m);
}

const char *attn_llama_chat_template(const attn_llama *m) {
    return m ? m->chat_template : NULL;
}

const struct attn_bpe *attn_llama_tokenizer(const attn_llama *m) {
    return m ? m->tok : NULL;
}

const attn_llama_config *attn_llama_get_config(const attn_llama *m) {
    return m ? &m->cfg : NULL;
}

int64_t attn_llama_param_count(const attn_llama *m) {
    if (!m) return 0;
    const int64_t VE = m->cfg.vocab_size * m->cfg.hidden_size;
    return attn_decoder_param_count(&m->dec) + VE +
           (m->cfg.tie_word_embeddings ? 0 : VE);
}

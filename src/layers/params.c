/* Parameter files: a little-endian binary layout (docs/params-format.md)
 * with a magic, a version, the kind and config of the model, the slice
 * table and the f32 block, closed by a CRC32 of everything before it.
 * The whole file is built in memory, written to a temporary name, flushed
 * to disk and renamed, so a crash never leaves half a file under the
 * name. Reading checks every field before trusting it. */
#include "layers.h"
#include "../io/binfile.h"

#include <limits.h>
#include <stddef.h>
#include <string.h>

#define MAGIC "ATTNPRM" /* 8 bytes with the NUL */
#define VERSION 1u
#define SLICE_BYTES (ATTN_SLICE_NAME_MAX + 8 + 8 + 8 + 4)
#define HEAD_BYTES (8 + 4 + ATTN_PARAMS_KIND_MAX + 4)

void attn_params_free(void *p) { attn__free(p); }

/* A fixed-size name field: NUL-terminated, zeros after the NUL (as the
 * writer leaves it), so that a loaded file re-saves to the same bytes. */
static int name_field_ok(const unsigned char *p, size_t cap) {
    const unsigned char *nul = memchr(p, 0, cap);
    if (!nul) return 0;
    for (const unsigned char *q = nul; q < p + cap; q++)
        if (*q) return 0;
    return 1;
}

attn_status attn_params_save(const char *path, const attn_params_header *hdr,
                             const attn_param_slice *slices, int64_t nslices,
                             const float *block, int64_t count) {
    ATTN__NEED(path);
    ATTN__NEED(hdr);
    ATTN__NEED(block);
    if (nslices < 0 || (nslices > 0 && !slices) || count < 1)
        return attn__fail(ATTN_E_INVALID, "nslices %lld and count %lld",
                          (long long)nslices, (long long)count);
    if (hdr->config_len < 0 || hdr->config_len > ATTN_PARAMS_MAX_CONFIG)
        return attn__fail(ATTN_E_INVALID, "config_len %d is outside [0, %d]",
                          (int)hdr->config_len, ATTN_PARAMS_MAX_CONFIG);
    if (memchr(hdr->kind, 0, ATTN_PARAMS_KIND_MAX) == NULL || !hdr->kind[0])
        return attn__fail(ATTN_E_INVALID, "kind must be 1 to %d characters",
                          ATTN_PARAMS_KIND_MAX - 1);
    for (int64_t s = 0; s < nslices; s++) {
        const attn_param_slice *sl = &slices[s];
        int64_t n;
        if (!memchr(sl->name, 0, ATTN_SLICE_NAME_MAX) || sl->offset < 0 ||
            !attn__mul_i64(sl->shape[0], sl->shape[1], &n) || n < 1 ||
            sl->offset > count - n)
            return attn__fail(ATTN_E_INVALID,
                              "slice %lld (%.47s) at %lld of "
                              "shape (%lld, %lld) does not fit %lld floats",
                              (long long)s, sl->name, (long long)sl->offset,
                              (long long)sl->shape[0], (long long)sl->shape[1],
                              (long long)count);
    }
    size_t size = HEAD_BYTES + 8 * (size_t)hdr->config_len + 8, data;
    if (!attn__mul_size((size_t)nslices, SLICE_BYTES, &data) ||
        (size += data) < data || !attn__mul_size((size_t)count, 4, &data) ||
        (size += data + 8 + 4) < data)
        return attn__fail(ATTN_E_NOMEM, "parameter file size overflows");
    unsigned char *buf = attn__alloc(size, 1, "parameter file image");
    if (!buf) return ATTN_E_NOMEM;
    unsigned char *p = buf;
    memcpy(p, MAGIC, 8);
    attn__put_u32(p + 8, VERSION);
    memset(p + 12, 0, ATTN_PARAMS_KIND_MAX);
    memcpy(p + 12, hdr->kind, strlen(hdr->kind));
    attn__put_u32(p + 12 + ATTN_PARAMS_KIND_MAX, (uint32_t)hdr->config_len);
    p += HEAD_BYTES;
    for (int i = 0; i < hdr->config_len; i++, p += 8)
        attn__put_u64(p, (uint64_t)hdr->config[i]);
    attn__put_u64(p, (uint64_t)nslices);
    p += 8;
    for (int64_t s = 0; s < nslices; s++) {
        memset(p, 0, ATTN_SLICE_NAME_MAX);
        memcpy(p, slices[s].name, strlen(slices[s].name));
        p += ATTN_SLICE_NAME_MAX;
        attn__put_u64(p, (uint64_t)slices[s].offset);
        attn__put_u64(p + 8, (uint64_t)slices[s].shape[0]);
        attn__put_u64(p + 16, (uint64_t)slices[s].shape[1]);
        attn__put_u32(p + 24, (uint32_t)slices[s].init);
        p += 28;
    }
    attn__put_u64(p, (uint64_t)count);
    p += 8;
    attn__put_f32s(p, block, count);
    p += 4 * count;
    attn__put_u32(p, attn__crc32(buf, size - 4));

    attn_status st = attn__write_atomic(path, buf, size);
    attn__free(buf);
    return st;
}

attn_status attn_params_load(const char *path, attn_params_header *hdr,
                             attn_param_slice **slices, int64_t *nslices,
                             float **block, int64_t *count) {
    ATTN__NEED(path);
    ATTN__NEED(hdr);
    ATTN__NEED(slices);
    ATTN__NEED(nslices);
    ATTN__NEED(block);
    ATTN__NEED(count);
    *slices = NULL;
    *block = NULL;
    unsigned char *buf;
    size_t n;
    attn_status st = attn__read_file(path, HEAD_BYTES + 8 + 8 + 4,
                                     "a parameter file", &buf, &n);
    if (st) return st;
    if (memcmp(buf, MAGIC, 8) != 0) {
        st = attn__bad_file(path, "not an attn parameter file (magic)");
        goto done;
    }
    uint32_t ver = attn__get_u32(buf + 8);
    if (ver != VERSION) {
        st = attn__fail(ATTN_E_FORMAT,
                        "%s: format version %u; this library "
                        "reads version %u",
                        path, ver, VERSION);
        goto done;
    }
    if (attn__get_u32(buf + n - 4) != attn__crc32(buf, n - 4)) {
        st = attn__bad_file(path, "CRC32 mismatch: the file is corrupted or "
                                  "truncated");
        goto done;
    }
    memset(hdr, 0, sizeof *hdr);
    memcpy(hdr->kind, buf + 12, ATTN_PARAMS_KIND_MAX);
    uint32_t clen = attn__get_u32(buf + 12 + ATTN_PARAMS_KIND_MAX);
    if (!name_field_ok(buf + 12, ATTN_PARAMS_KIND_MAX) ||
        clen > ATTN_PARAMS_MAX_CONFIG) {
        st = attn__bad_file(path, "bad kind or config length");
        goto done;
    }
    hdr->config_len = (int32_t)clen;
    size_t pos = HEAD_BYTES;
    if (n - 4 < pos + 8 * (size_t)clen + 8) {
        st = attn__bad_file(path, "truncated config");
        goto done;
    }
    for (uint32_t i = 0; i < clen; i++, pos += 8)
        hdr->config[i] = (int64_t)attn__get_u64(buf + pos);
    uint64_t ns = attn__get_u64(buf + pos);
    pos += 8;
    if (ns > (n - 4 - pos) / SLICE_BYTES) {
        st = attn__bad_file(path, "slice table larger than the file");
        goto done;
    }
    size_t after_slices = pos + (size_t)ns * SLICE_BYTES;
    if (n - 4 < after_slices + 8) {
        st = attn__bad_file(path, "truncated before the parameter count");
        goto done;
    }
    uint64_t cnt = attn__get_u64(buf + after_slices);
    if (cnt < 1 || cnt > (n - 4 - after_slices - 8) / 4 ||
        n - 4 - after_slices - 8 != cnt * 4) {
        st = attn__bad_file(path, "parameter count disagrees with the file "
                                  "size");
        goto done;
    }
    *slices =
        attn__alloc(ns ? (size_t)ns : 1, sizeof(attn_param_slice), "slices");
    *block = attn__alloc((size_t)cnt, sizeof(float), "parameters");
    if (!*slices || !*block) {
        st = ATTN_E_NOMEM;
        goto done;
    }
    for (uint64_t s = 0; s < ns; s++, pos += SLICE_BYTES) {
        attn_param_slice *sl = &(*slices)[s];
        memset(sl, 0, sizeof *sl);
        memcpy(sl->name, buf + pos, ATTN_SLICE_NAME_MAX);
        sl->offset = (int64_t)attn__get_u64(buf + pos + ATTN_SLICE_NAME_MAX);
        sl->shape[0] =
            (int64_t)attn__get_u64(buf + pos + ATTN_SLICE_NAME_MAX + 8);
        sl->shape[1] =
            (int64_t)attn__get_u64(buf + pos + ATTN_SLICE_NAME_MAX + 16);
        const uint32_t init =
            attn__get_u32(buf + pos + ATTN_SLICE_NAME_MAX + 24);
        sl->init = (attn_init_kind)init;
        int64_t e;
        if (init > ATTN_INIT_ONE) {
            st = attn__fail(ATTN_E_FORMAT,
                            "%s: slice %llu has init kind %u "
                            "(0, 1 or 2 exist)",
                            path, (unsigned long long)s, init);
            goto done;
        }
        if (!name_field_ok(buf + pos, ATTN_SLICE_NAME_MAX) || sl->offset < 0 ||
            !attn__mul_i64(sl->shape[0], sl->shape[1], &e) || e < 1 ||
            sl->offset > (int64_t)cnt - e) {
            st = attn__bad_file(path,
                                "a slice lies outside the parameter block");
            goto done;
        }
    }
    pos += 8;
    attn__get_f32s(buf + pos, *block, (int64_t)cnt);
    *nslices = (int64_t)ns;
    *count = (int64_t)cnt;
done:
    attn__free(buf);
    if (st) {
        attn__free(*slices);
        attn__free(*block);
        *slices = NULL;
        *block = NULL;
    }
    return st;
}

/* ---- typed files ------------------------------------------------------ */

/* Saves with the slice table the config implies. */
static attn_status save_typed(const char *path, const char *kind,
                              const int64_t *cfg, int ncfg,
                              const attn_param_slice *sl, int64_t ns,
                              const float *params, int64_t count) {
    attn_params_header h;
    memset(&h, 0, sizeof h);
    snprintf(h.kind, sizeof h.kind, "%s", kind);
    h.config_len = ncfg;
    memcpy(h.config, cfg, sizeof(int64_t) * (size_t)ncfg);
    return attn_params_save(path, &h, sl, ns, params, count);
}

/* Loads a file, checks its kind and config length, and hands back its
 * config values, block and slices (the caller compares the slices). */
static attn_status load_typed(const char *path, const char *kind, int ncfg,
                              attn_params_header *h, attn_param_slice **sl,
                              int64_t *ns, float **block, int64_t *count) {
    attn_status st = attn_params_load(path, h, sl, ns, block, count);
    if (st) return st;
    if (strcmp(h->kind, kind) != 0 || h->config_len != ncfg) {
        st = attn__fail(ATTN_E_FORMAT,
                        "%s holds a '%s' model (%d config "
                        "values), not '%s'",
                        path, h->kind, (int)h->config_len, kind);
        attn__free(*sl);
        attn__free(*block);
        *block = NULL;
    }
    return st;
}

/* The floats a slice table covers: where its last slice ends. */
static int64_t slices_end(const attn_param_slice *sl, int64_t n) {
    int64_t end = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t e = sl[i].offset + sl[i].shape[0] * sl[i].shape[1];
        if (e > end) end = e;
    }
    return end;
}

/* The slices in the file must be the ones the config implies. */
static attn_status same_slices(const char *path, const attn_param_slice *a,
                               int64_t na, const attn_param_slice *b,
                               int64_t nb, int64_t count, int64_t want) {
    if (na != nb || count != want)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: %lld slices and %lld floats, but "
                          "its config implies %lld and %lld",
                          path, (long long)na, (long long)count, (long long)nb,
                          (long long)want);
    for (int64_t i = 0; i < na; i++)
        if (strcmp(a[i].name, b[i].name) != 0 || a[i].offset != b[i].offset ||
            a[i].shape[0] != b[i].shape[0] || a[i].shape[1] != b[i].shape[1] ||
            a[i].init != b[i].init)
            return attn__fail(ATTN_E_FORMAT,
                              "%s: slice %lld is %.47s "
                              "(offset %lld, init %d), its config implies "
                              "%.47s (offset %lld, init %d)",
                              path, (long long)i, a[i].name,
                              (long long)a[i].offset, (int)a[i].init, b[i].name,
                              (long long)b[i].offset, (int)b[i].init);
    return ATTN_OK;
}

/* ---- the typed files' configs as words -------------------------------- */

/* The tables below are the file formats of docs/params-format.md, field
 * by field (layers.h: attn__cfg_field). */
typedef attn__cfg_field cfg_field;
typedef attn__typed_kind typed_kind;
#define CFG ATTN__CFG
#define CFG_I64 ATTN__CFG_I64
#define CFG_INT ATTN__CFG_INT
#define CFG_F64 ATTN__CFG_F64
#define CFG_ZERO ATTN__CFG_ZERO
#define CFG_AGAIN ATTN__CFG_AGAIN

/* enums are stored as int-sized words */
_Static_assert(sizeof(attn_attention_type) == sizeof(int) &&
                   sizeof(attn_activation) == sizeof(int),
               "config enums are int-sized");

static const cfg_field additive_cfg[6] = {
    CFG(attn_additive_config, query_dim, CFG_I64),
    CFG(attn_additive_config, key_dim, CFG_I64),
    CFG(attn_additive_config, value_dim, CFG_I64),
    CFG(attn_additive_config, attn_dim, CFG_I64),
    CFG(attn_additive_config, bias, CFG_INT),
    CFG(attn_additive_config, context_from_keys, CFG_INT)};
static const cfg_field mha_cfg[6] = {
    CFG(attn_mha_config, d_model, CFG_I64),
    CFG(attn_mha_config, num_heads, CFG_I64),
    CFG(attn_mha_config, num_kv_heads, CFG_I64),
    CFG(attn_mha_config, kdim, CFG_I64),
    CFG(attn_mha_config, vdim, CFG_I64),
    CFG(attn_mha_config, bias, CFG_INT)};
static const cfg_field encoder_cfg[11] = {
    CFG(attn_encoder_config, num_layers, CFG_I64),
    CFG(attn_encoder_config, d_model, CFG_I64),
    CFG(attn_encoder_config, num_heads, CFG_I64),
    CFG(attn_encoder_config, num_kv_heads, CFG_I64),
    CFG(attn_encoder_config, dim_feedforward, CFG_I64),
    CFG(attn_encoder_config, attention, CFG_INT),
    CFG(attn_encoder_config, additive_dim, CFG_I64),
    CFG(attn_encoder_config, activation, CFG_INT),
    CFG(attn_encoder_config, norm_first, CFG_INT),
    CFG(attn_encoder_config, final_norm, CFG_INT),
    CFG(attn_encoder_config, layer_norm_eps, CFG_F64)};

static void cfg_to_words(const cfg_field *f, int n, const void *cfg,
                         int64_t *v) {
    for (int i = 0; i < n; i++) {
        const char *p = (const char *)cfg + f[i].off;
        int x;
        switch (f[i].kind) {
        case CFG_INT:
        case CFG_AGAIN:
            memcpy(&x, p, sizeof x);
            v[i] = x;
            break;
        case CFG_ZERO: v[i] = 0; break;
        default: memcpy(&v[i], p, 8); break; /* int64, or a double's bits */
        }
    }
}

/* Fills a zeroed config from its words. */
static void cfg_from_words(const cfg_field *f, int n, const int64_t *v,
                           void *cfg) {
    for (int i = 0; i < n; i++) {
        char *p = (char *)cfg + f[i].off;
        int x;
        switch (f[i].kind) {
        case CFG_INT:
            x = (int)v[i];
            memcpy(p, &x, sizeof x);
            break;
        case CFG_ZERO:
        case CFG_AGAIN: break;
        default: memcpy(p, &v[i], 8); break;
        }
    }
}

/* A word of an int field must be an int (a cast would read garbage in the
 * upper half, 0x100000001, as a valid 1); a repeat must match the word it
 * repeats. */
static attn_status words_check(const typed_kind *k, const char *path,
                               const attn_params_header *h) {
    for (int i = 0; i < k->nfields; i++) {
        const int64_t v = h->config[i];
        if ((k->fields[i].kind == CFG_INT || k->fields[i].kind == CFG_AGAIN) &&
            (v < INT_MIN || v > INT_MAX))
            return attn__fail(ATTN_E_FORMAT,
                              "%s: '%s' config value %d is "
                              "%lld, outside the range of an int",
                              path, h->kind, i, (long long)v);
        if (k->fields[i].kind != CFG_AGAIN) continue;
        for (int j = 0; j < i; j++)
            if (k->fields[j].off == k->fields[i].off &&
                k->fields[j].kind == CFG_INT && h->config[j] != v)
                return attn__fail(ATTN_E_FORMAT,
                                  "%s: '%s' config value %d is %lld, but "
                                  "value %d, which it repeats, is %lld",
                                  path, h->kind, i, (long long)v, j,
                                  (long long)h->config[j]);
    }
    return ATTN_OK;
}

attn_status attn__load_kind(const typed_kind *k, const char *path, void *cfg,
                            float **params) {
    ATTN__NEED(cfg);
    ATTN__NEED(params);
    attn_params_header h;
    attn_param_slice *sl;
    int64_t ns, count;
    float *block;
    attn_status st =
        load_typed(path, k->kind, k->nfields, &h, &sl, &ns, &block, &count);
    if (st) return st;
    if ((st = words_check(k, path, &h))) {
        attn__free(sl);
        attn__free(block);
        return st;
    }
    memset(cfg, 0, k->size);
    cfg_from_words(k->fields, k->nfields, h.config, cfg);
    int64_t want_n = 0;
    attn_param_slice *want = NULL;
    st = k->slices(cfg, NULL, 0, &want_n);
    if (st) {
        st = attn__fail(ATTN_E_FORMAT, "%s: invalid %s config (%s)", path,
                        k->kind, attn_last_error());
    } else if (!(want = attn__alloc((size_t)want_n, sizeof *want, "slices"))) {
        st = ATTN_E_NOMEM;
    } else {
        k->slices(cfg, want, want_n, &want_n);
        st = same_slices(path, sl, ns, want, want_n, count,
                         slices_end(want, want_n));
    }
    attn__free(want);
    attn__free(sl);
    if (st) {
        attn__free(block);
        return st;
    }
    *params = block;
    return ATTN_OK;
}

static const typed_kind additive_kind = {"additive", additive_cfg, 6,
                                         sizeof(attn_additive_config),
                                         attn__additive_slices};
static const typed_kind mha_kind = {"mha", mha_cfg, 6, sizeof(attn_mha_config),
                                    attn__mha_slices};
static const typed_kind encoder_kind = {"encoder", encoder_cfg, 11,
                                        sizeof(attn_encoder_config),
                                        attn__encoder_slices};

attn_status attn_additive_save(const char *path, const attn_additive_config *c,
                               const float *params) {
    return attn__save_kind(&additive_kind, path, c, params);
}

attn_status attn_additive_load(const char *path, attn_additive_config *cfg,
                               float **params) {
    return attn__load_kind(&additive_kind, path, cfg, params);
}

attn_status attn_mha_save(const char *path, const attn_mha_config *c,
                          const float *params) {
    return attn__save_kind(&mha_kind, path, c, params);
}

attn_status attn_mha_load(const char *path, attn_mha_config *cfg,
                          float **params) {
    return attn__load_kind(&mha_kind, path, cfg, params);
}

attn_status attn__save_kind(const typed_kind *k, const char *path,
                            const void *c, const float *params) {
    int64_t ns, v[ATTN_PARAMS_MAX_CONFIG];
    attn_status st = k->slices(c, NULL, 0, &ns);
    if (st) return st;
    ATTN__NEED(path);
    ATTN__NEED(params);
    attn_param_slice *sl = attn__alloc((size_t)ns, sizeof *sl, "slices");
    if (!sl) return ATTN_E_NOMEM;
    k->slices(c, sl, ns, &ns);
    cfg_to_words(k->fields, k->nfields, c, v);
    st = save_typed(path, k->kind, v, k->nfields, sl, ns, params,
                    slices_end(sl, ns));
    attn__free(sl);
    return st;
}

attn_status attn_encoder_save(const char *path, const attn_encoder_config *c,
                              const float *params) {
    return attn__save_kind(&encoder_kind, path, c, params);
}

attn_status attn_encoder_load(const char *path, attn_encoder_config *cfg,
                              float **params) {
    return attn__load_kind(&encoder_kind, path, cfg, params);
}

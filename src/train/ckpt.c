/* The framing both kinds of training checkpoint share (ckpt.h,
 * docs/checkpoint-format.md): the header, the lengths and the CRC checked
 * before anything is allocated, the state behind the configuration, and
 * the atomic write (a temporary file in the target's folder, fsync'ed,
 * renamed over the target and the folder fsync'ed: a reader sees the old
 * file or the new one). */
#include "ckpt.h"
#include "../io/binfile.h"

#include <stdio.h>

attn_status attn__ckpt_save(const attn__ckpt_kind *k, const uint64_t *w,
                            const attn__train_state *s, const char *path) {
    const size_t head = attn__ckpt_head_bytes(k);
    size_t data, size;
    if (!attn__mul_size((size_t)s->n, 12, &data) ||
        (size = head + data + 4) < data)
        return attn__fail(ATTN_E_NOMEM, "checkpoint size overflows");
    unsigned char *buf = attn__alloc(size, 1, "checkpoint image");
    if (!buf) return ATTN_E_NOMEM;
    unsigned char *p = buf;
    memcpy(p, k->magic, 8);
    attn__put_u32(p + 8, ATTN__CKPT_VERSION);
    attn__put_u32(p + 12, (uint32_t)k->nfields);
    p += 16;
    for (int i = 0; i < k->nfields; i++, p += 8) attn__put_u64(p, w[i]);
    attn__put_u64(p, (uint64_t)s->step);
    p += 8;
    for (int i = 0; i < 4; i++, p += 8) attn__put_u64(p, s->rng.s[i]);
    attn__put_u64(p, (uint64_t)s->n);
    p += 8;
    attn__put_f32s(p, s->params, s->n);
    attn__put_f32s(p + 4 * s->n, s->m, s->n);
    attn__put_f32s(p + 8 * s->n, s->v, s->n);
    p += 12 * s->n;
    attn__put_u32(p, attn__crc32(buf, size - 4));
    attn_status st = attn__write_atomic(path, buf, size);
    attn__free(buf);
    return st;
}

void attn__ckpt_image_free(attn__ckpt_image *img) {
    attn__free(img->buf);
    img->buf = NULL;
}

static attn_status framing(const attn__ckpt_kind *k, const char *path,
                           attn__ckpt_image *img) {
    const unsigned char *buf = img->buf;
    const size_t n = img->size, head = attn__ckpt_head_bytes(k);
    if (memcmp(buf, k->magic, 8) != 0)
        return attn__bad_file(path, k->other_magic &&
                                            memcmp(buf, k->other_magic, 8) == 0
                                        ? k->other_it
                                        : k->not_it);
    const uint32_t ver = attn__get_u32(buf + 8), nf = attn__get_u32(buf + 12);
    if (ver != ATTN__CKPT_VERSION || nf != (uint32_t)k->nfields)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: checkpoint version %u with %u "
                          "fields; this library reads version %u with %d",
                          path, ver, nf, ATTN__CKPT_VERSION, k->nfields);
    if (n < head + 4)
        return attn__bad_file(path,
                              "too short to be a checkpoint (truncated?)");
    const uint64_t count = attn__get_u64(buf + head - 8);
    if (count > (n - head - 4) / 12 || head + 12 * count + 4 != n)
        return attn__fail(ATTN_E_FORMAT,
                          "%s: %zu bytes, but a checkpoint of "
                          "%llu parameters has %llu (truncated or padded)",
                          path, n, (unsigned long long)count,
                          (unsigned long long)(head + 12 * count + 4));
    if (attn__get_u32(buf + n - 4) != attn__crc32(buf, n - 4))
        return attn__bad_file(path, "CRC32 mismatch: the file is corrupted");
    img->count = count;
    for (int i = 0; i < k->nfields; i++)
        img->w[i] = attn__get_u64(buf + 16 + 8 * (size_t)i);
    return ATTN_OK;
}

attn_status attn__ckpt_read(const attn__ckpt_kind *k, const char *path,
                            attn__ckpt_image *img) {
    ATTN_ASSERT(k->nfields <= ATTN__CKPT_MAX_FIELDS);
    memset(img, 0, sizeof *img);
    attn_status st =
        attn__read_file(path, 16, "a checkpoint", &img->buf, &img->size);
    if (st) return st;
    if ((st = framing(k, path, img))) attn__ckpt_image_free(img);
    return st;
}

attn_status attn__ckpt_restore(const attn__ckpt_kind *k,
                               const attn__ckpt_image *img, const char *path,
                               attn__train_state *s) {
    ATTN_ASSERT((uint64_t)s->n == img->count);
    const unsigned char *p = img->buf + 16 + 8 * (size_t)k->nfields;
    const int64_t step = (int64_t)attn__get_u64(p);
    p += 8;
    if (step < 0) return attn__bad_file(path, "negative step");
    s->step = step;
    for (int i = 0; i < 4; i++, p += 8) s->rng.s[i] = attn__get_u64(p);
    p += 8; /* the count, read by attn__ckpt_read */
    attn__get_f32s(p, s->params, s->n);
    attn__get_f32s(p + 4 * s->n, s->m, s->n);
    attn__get_f32s(p + 8 * s->n, s->v, s->n);
    return ATTN_OK;
}

int attn__ckpt_encoder_words(attn_encoder_config *e, uint64_t *w, int k,
                             int to_file, int *badp) {
    int bad = *badp;
    ATTN__CKPT_I64(e->num_layers);
    ATTN__CKPT_I64(e->d_model);
    ATTN__CKPT_I64(e->num_heads);
    ATTN__CKPT_I64(e->num_kv_heads);
    ATTN__CKPT_I64(e->dim_feedforward);
    ATTN__CKPT_ENUM(e->attention, attn_attention_type);
    ATTN__CKPT_I64(e->additive_dim);
    ATTN__CKPT_ENUM(e->activation, attn_activation);
    ATTN__CKPT_INT(e->norm_first);
    ATTN__CKPT_INT(e->final_norm);
    ATTN__CKPT_DBL(e->layer_norm_eps);
    *badp = bad;
    return k;
}

int attn__ckpt_adamw_words(attn_adamw_config *o, uint64_t *w, int k,
                           int to_file) {
    ATTN__CKPT_DBL(o->lr);
    ATTN__CKPT_DBL(o->beta1);
    ATTN__CKPT_DBL(o->beta2);
    ATTN__CKPT_DBL(o->eps);
    ATTN__CKPT_DBL(o->weight_decay);
    ATTN__CKPT_I64(o->warmup);
    ATTN__CKPT_I64(o->decay_steps);
    ATTN__CKPT_DBL(o->min_lr);
    ATTN__CKPT_DBL(o->clip_norm);
    return k;
}

attn_status attn__ckpt_invalid(const char *path) {
    char detail[256];
    snprintf(detail, sizeof detail, "%s", attn_last_error());
    return attn__fail(ATTN_E_FORMAT, "%s: its configuration is invalid: %s",
                      path, detail);
}

attn_status attn__ckpt_count_check(const char *path, uint64_t count,
                                   int64_t need) {
    if (need >= 1 && (uint64_t)need == count) return ATTN_OK;
    return attn__fail(ATTN_E_FORMAT,
                      "%s: %llu parameters, but its configuration needs %lld",
                      path, (unsigned long long)count, (long long)need);
}

/* Rotary position embeddings: the frequencies (with the linear and llama3
 * scalings), the rotation of a (B, H, L, D) tensor and its transpose (the
 * backward), and the rotated copies of q and k that attention takes. */
#include "kernels.h"
#include "rope.h"

#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define ROPE_MAX_POSITION ((int64_t)1 << 40)

/* Feature index of the two members of pair i. */
static inline void pair_index(int style, int64_t rd, int64_t i, int64_t *a,
                              int64_t *b) {
    if (style == ATTN_ROPE_INTERLEAVED) {
        *a = 2 * i;
        *b = 2 * i + 1;
    } else {
        *a = i;
        *b = i + rd / 2;
    }
}

void attn_rope_init(attn_rope *rope) {
    if (!rope) return;
    memset(rope, 0, sizeof *rope);
    rope->style = ATTN_ROPE_NEOX;
    rope->theta = 10000.0;
    rope->scaling = ATTN_ROPE_SCALING_NONE;
    rope->factor = 1.0;
    rope->low_freq_factor = 1.0;
    rope->high_freq_factor = 4.0;
    rope->original_max_position = 8192.0;
}

int64_t attn__rope_dim(const attn_rope *rope, int64_t head_dim) {
    return rope->rotary_dim > 0 ? rope->rotary_dim : head_dim;
}

attn_status attn_rope_check(const attn_rope *rope, int64_t head_dim) {
    if (!rope) return attn__fail(ATTN_E_INVALID, "rope is NULL");
    if (head_dim < 1)
        return attn__fail(ATTN_E_INVALID, "rope: head dim %lld < 1",
                          (long long)head_dim);
    if (rope->style != ATTN_ROPE_NEOX && rope->style != ATTN_ROPE_INTERLEAVED)
        return attn__fail(ATTN_E_INVALID,
                          "rope.style %d is neither ATTN_ROPE_NEOX (0) nor "
                          "ATTN_ROPE_INTERLEAVED (1)",
                          rope->style);
    int64_t rd = attn__rope_dim(rope, head_dim);
    if (rope->rotary_dim < 0 || rd > head_dim || rd % 2 != 0)
        return attn__fail(ATTN_E_INVALID,
                          "rope.rotary_dim %lld must be even and within the "
                          "head dim %lld (0: all of it)",
                          (long long)rope->rotary_dim, (long long)head_dim);
    if (!(rope->theta > 1.0) || !isfinite(rope->theta))
        return attn__fail(ATTN_E_INVALID,
                          "rope.theta %g must be finite and > 1", rope->theta);
    if (rope->scaling == ATTN_ROPE_SCALING_NONE) return ATTN_OK;
    if (rope->scaling != ATTN_ROPE_SCALING_LINEAR &&
        rope->scaling != ATTN_ROPE_SCALING_LLAMA3)
        return attn__fail(ATTN_E_INVALID,
                          "rope.scaling %d is not NONE (0), LINEAR (1) or "
                          "LLAMA3 (2)",
                          rope->scaling);
    if (!(rope->factor >= 1.0) || !isfinite(rope->factor))
        return attn__fail(ATTN_E_INVALID,
                          "rope.factor %g must be finite and >= 1",
                          rope->factor);
    if (rope->scaling == ATTN_ROPE_SCALING_LLAMA3) {
        double lo = rope->low_freq_factor, hi = rope->high_freq_factor;
        double om = rope->original_max_position;
        if (!(lo > 0) || !isfinite(lo) || !(hi > lo) || !isfinite(hi))
            return attn__fail(ATTN_E_INVALID,
                              "rope: llama3 needs 0 < low_freq_factor (%g) < "
                              "high_freq_factor (%g)",
                              lo, hi);
        if (!(om > 0) || !isfinite(om))
            return attn__fail(ATTN_E_INVALID,
                              "rope.original_max_position %g must be finite "
                              "and > 0",
                              om);
    }
    return ATTN_OK;
}

/* Unchecked: rope valid for head_dim, inv_freq[rd / 2]. */
void attn__rope_freqs(const attn_rope *rope, int64_t head_dim,
                      double *inv_freq) {
    int64_t rd = attn__rope_dim(rope, head_dim);
    const double two_pi = 6.283185307179586;
    for (int64_t i = 0; i < rd / 2; i++) {
        double f = pow(rope->theta, -(double)(2 * i) / (double)rd);
        if (rope->scaling == ATTN_ROPE_SCALING_LINEAR) {
            f /= rope->factor;
        } else if (rope->scaling == ATTN_ROPE_SCALING_LLAMA3) {
            double om = rope->original_max_position;
            double lo_f = rope->low_freq_factor, hi_f = rope->high_freq_factor;
            double w = two_pi / f;
            if (w > om / lo_f) {
                f /= rope->factor; /* long wavelengths: interpolated */
            } else if (w >= om / hi_f) {
                double s = (om / w - lo_f) / (hi_f - lo_f);
                f = (1.0 - s) * f / rope->factor + s * f;
            } /* short wavelengths: kept */
        }
        inv_freq[i] = f;
    }
}

void attn__rope_row_f32(const attn_rope *rope, const double *freq,
                        int64_t head_dim, int64_t pos, float *row) {
    const int64_t rd = attn__rope_dim(rope, head_dim);
    for (int64_t i = 0; i < rd / 2; i++) {
        int64_t ia, ib;
        pair_index(rope->style, rd, i, &ia, &ib);
        double a = (double)pos * freq[i], c = cos(a), s = sin(a);
        double x0 = row[ia], x1 = row[ib];
        row[ia] = (float)(c * x0 - s * x1);
        row[ib] = (float)(s * x0 + c * x1);
    }
}

attn_status attn_rope_inv_freq(const attn_rope *rope, int64_t head_dim,
                               double *inv_freq, int64_t n) {
    attn_status st = attn_rope_check(rope, head_dim);
    if (st) return st;
    if (!inv_freq) return attn__fail(ATTN_E_INVALID, "inv_freq is NULL");
    int64_t rd = attn__rope_dim(rope, head_dim);
    if (n != rd / 2)
        return attn__fail(ATTN_E_SHAPE,
                          "inv_freq has %lld entries but the rotary dim %lld "
                          "has %lld pairs",
                          (long long)n, (long long)rd, (long long)(rd / 2));
    attn__rope_freqs(rope, head_dim, inv_freq);
    return ATTN_OK;
}

attn_status attn__rope_check_positions(const char *name, const int64_t *pos,
                                       int64_t n, int64_t B, int64_t L) {
    if (!pos) return ATTN_OK;
    if (n != L && n != B * L)
        return attn__fail(ATTN_E_SHAPE,
                          "%s has %lld entries; it takes L = %lld or B x L = "
                          "%lld",
                          name, (long long)n, (long long)L, (long long)(B * L));
    for (int64_t i = 0; i < n; i++)
        if (pos[i] < 0 || pos[i] > ROPE_MAX_POSITION)
            return attn__fail(ATTN_E_INVALID,
                              "%s[%lld] = %lld is outside [0, 2^40]", name,
                              (long long)i, (long long)pos[i]);
    return ATTN_OK;
}

static inline void store(const attn_tensor *t, int64_t off, double v) {
    if (t->dtype == ATTN_F64)
        ((double *)t->data)[off] = v;
    else
        ((float *)t->data)[off] = (float)v;
}

/* y = R(pos) x, or with backward y += R(pos)^T x (the angle negated). */
static attn_status rotate(const attn_rope *rope, const attn_tensor *x,
                          const int64_t *positions, int64_t n_positions,
                          attn_tensor *y, int threads, int backward) {
    const int64_t B = x->shape[0], H = x->shape[1], L = x->shape[2],
                  D = x->shape[3];
    const int64_t rd = attn__rope_dim(rope, D), np = rd / 2;
    double *freq = attn__alloc((size_t)(np > 0 ? np : 1), sizeof(double),
                               "rope frequencies");
    if (!freq) return ATTN_E_NOMEM;
    attn__rope_freqs(rope, D, freq);
    int nt = attn__omp_threads(threads);
    int failed = 0;
#pragma omp parallel num_threads(nt) if (B * L > 1) /* a step: one row */
    {
        double *cs =
            attn__alloc((size_t)(2 * np + 2), sizeof(double), "rope angles");
        if (!cs) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t bl = 0; bl < B * L; bl++) {
            if (!cs) continue;
            int64_t b = bl / L, l = bl % L;
            int64_t p = !positions             ? l
                        : n_positions == B * L ? positions[bl]
                                               : positions[l];
            for (int64_t i = 0; i < np; i++) {
                double a = (double)p * freq[i];
                cs[2 * i] = cos(a);
                cs[2 * i + 1] = backward ? -sin(a) : sin(a);
            }
            for (int64_t h = 0; h < H; h++) {
                int64_t yo = attn__off(y, b, h, l, 0), ys = y->stride[3];
                for (int64_t i = 0; i < np; i++) {
                    int64_t ia, ib;
                    pair_index(rope->style, rd, i, &ia, &ib);
                    double x0 = attn_tensor_get(x, b, h, l, ia);
                    double x1 = attn_tensor_get(x, b, h, l, ib);
                    double c = cs[2 * i], s = cs[2 * i + 1];
                    double y0 = c * x0 - s * x1, y1 = s * x0 + c * x1;
                    if (backward) {
                        y0 += attn_tensor_get(y, b, h, l, ia);
                        y1 += attn_tensor_get(y, b, h, l, ib);
                    }
                    store(y, yo + ia * ys, y0);
                    store(y, yo + ib * ys, y1);
                }
                for (int64_t d = rd; d < D; d++) {
                    double v = attn_tensor_get(x, b, h, l, d);
                    if (backward) v += attn_tensor_get(y, b, h, l, d);
                    store(y, yo + d * ys, v);
                }
            }
        }
        attn__free(cs);
    }
    attn__free(freq);
    return failed ? ATTN_E_NOMEM : ATTN_OK;
}

static attn_status check_io(const attn_rope *rope, const attn_tensor *x,
                            const char *xn, const int64_t *positions,
                            int64_t n_positions, const attn_tensor *y,
                            const char *yn, int x_any_float) {
    attn_status st;
    if (!x || !y) return attn__fail(ATTN_E_INVALID, "%s is NULL", !x ? xn : yn);
    if ((st = attn_tensor_check(x, xn)) || (st = attn_tensor_check(y, yn)))
        return st;
    if ((st = attn_rope_check(rope, x->shape[3]))) return st;
    int xok = x->dtype == ATTN_F32 || x->dtype == ATTN_F64 ||
              (x_any_float && (x->dtype == ATTN_F16 || x->dtype == ATTN_BF16));
    if (!xok)
        return attn__fail(ATTN_E_DTYPE, "%s is %s; rope takes %s", xn,
                          attn_dtype_name(x->dtype),
                          x_any_float ? "f32, f16, bf16 or f64" : "f32 or f64");
    if (y->dtype != ATTN_F32 && y->dtype != ATTN_F64)
        return attn__fail(ATTN_E_DTYPE, "%s is %s; rope writes f32 or f64", yn,
                          attn_dtype_name(y->dtype));
    for (int a = 0; a < 4; a++) {
        if (y->shape[a] != x->shape[a])
            return attn__fail(
                ATTN_E_SHAPE,
                "%s is (%lld, %lld, %lld, %lld) but %s is (%lld, %lld, "
                "%lld, %lld)",
                yn, (long long)y->shape[0], (long long)y->shape[1],
                (long long)y->shape[2], (long long)y->shape[3], xn,
                (long long)x->shape[0], (long long)x->shape[1],
                (long long)x->shape[2], (long long)x->shape[3]);
        if (y->stride[a] == 0 && y->shape[a] > 1)
            return attn__fail(ATTN_E_SHAPE, "%s broadcasts axis %d", yn, a);
    }
    if ((st = attn__rope_check_positions("positions", positions, n_positions,
                                         x->shape[0], x->shape[2])))
        return st;
    return attn__check_finite(x, xn);
}

attn_status attn_rope_forward(const attn_rope *rope, const attn_tensor *x,
                              const int64_t *positions, int64_t n_positions,
                              attn_tensor *y, int threads) {
    attn_status st = check_io(rope, x, "x", positions, n_positions, y, "y", 1);
    if (st) return st;
    if (x->data == y->data &&
        (x->dtype != y->dtype ||
         memcmp(x->stride, y->stride, sizeof x->stride) != 0))
        return attn__fail(ATTN_E_INVALID,
                          "y is x's data with another dtype or strides: "
                          "in place, y must be x itself");
    return rotate(rope, x, positions, n_positions, y, threads, 0);
}

attn_status attn_rope_backward(const attn_rope *rope, const attn_tensor *dy,
                               const int64_t *positions, int64_t n_positions,
                               attn_tensor *dx, int threads) {
    attn_status st =
        check_io(rope, dy, "dy", positions, n_positions, dx, "dx", 0);
    if (st) return st;
    if (dy->data == dx->data)
        return attn__fail(ATTN_E_INVALID, "dx is dy's data: they must not "
                                          "overlap");
    return rotate(rope, dy, positions, n_positions, dx, threads, 1);
}

void attn__rope_query_positions(const attn_mask *mask, int64_t B, int64_t Lq,
                                int64_t Lk, const int64_t *key_lens,
                                int64_t *out) {
    for (int64_t b = 0; b < B; b++) {
        int64_t lq = mask->query_lengths ? mask->query_lengths[b] : Lq;
        int64_t lk = key_lens ? key_lens[b] : Lk;
        int64_t shift = mask->align == ATTN_ALIGN_BOTTOM_RIGHT ? lk - lq : 0;
        for (int64_t i = 0; i < Lq; i++) {
            int64_t c = i + shift;
            out[b * Lq + i] = c < 0 ? 0 : c; /* padded rows see no key */
        }
    }
}

attn_status attn__rope_copy(const attn_rope *rope, const attn_tensor *src,
                            const int64_t *pos, int64_t n_pos, int threads,
                            attn_tensor *dst, void **buf) {
    attn_dtype dt = src->dtype == ATTN_F64 ? ATTN_F64 : ATTN_F32;
    int64_t n = attn_tensor_numel(src);
    *buf = attn__alloc((size_t)n, attn_dtype_size(dt), "rotated copy");
    if (!*buf) return ATTN_E_NOMEM;
    *dst = attn_tensor_4d(*buf, dt, src->shape[0], src->shape[1], src->shape[2],
                          src->shape[3]);
    return attn_rope_forward(rope, src, pos, n_pos, dst, threads);
}

void attn__rope_qk_free(attn__rope_qk *r) {
    attn__free(r->qpos);
    attn__free(r->qbuf);
    attn__free(r->kbuf);
    attn__free(r->vbuf);
    memset(r, 0, sizeof *r);
}

attn_status attn__rope_qk_make(const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_sdpa_opts *opts,
                               attn__rope_qk *r) {
    memset(r, 0, sizeof *r);
    const attn_rope *rope = opts->rope;
    const int64_t B = q->shape[0], Lq = q->shape[2], Lk = k->shape[2];
    attn_status st = attn_rope_check(rope, q->shape[3]);
    if (st) return st;
    if ((st = attn__rope_check_positions("rope_q_positions",
                                         opts->rope_q_positions,
                                         opts->n_rope_q_positions, B, Lq)) ||
        (st = attn__rope_check_positions("rope_k_positions",
                                         opts->rope_k_positions,
                                         opts->n_rope_k_positions, B, Lk)))
        return st;
    r->qpos = attn__alloc((size_t)(B * Lq), sizeof(int64_t), "positions");
    if (!r->qpos) return ATTN_E_NOMEM;
    if (opts->rope_q_positions) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < Lq; i++)
                r->qpos[b * Lq + i] =
                    opts->rope_q_positions[opts->n_rope_q_positions == Lq
                                               ? i
                                               : b * Lq + i];
    } else {
        attn__rope_query_positions(&opts->mask, B, Lq, Lk,
                                   opts->mask.key_lengths, r->qpos);
    }
    r->kpos = opts->rope_k_positions;
    r->n_kpos = opts->rope_k_positions ? opts->n_rope_k_positions : 0;
    st = attn__rope_copy(rope, q, r->qpos, B * Lq, opts->threads, &r->q,
                         &r->qbuf);
    if (!st)
        st = attn__rope_copy(rope, k, r->kpos, r->n_kpos, opts->threads, &r->k,
                             &r->kbuf);
    if (!st && v) {
        r->v = *v;
        if (v->dtype != r->q.dtype) { /* f16 / bf16: q and k are f32 now */
            r->vbuf = attn__f32_copy(v);
            if (!r->vbuf)
                st = ATTN_E_NOMEM;
            else
                r->v = attn_tensor_4d(r->vbuf, ATTN_F32, v->shape[0],
                                      v->shape[1], v->shape[2], v->shape[3]);
        }
    }
    if (st) {
        attn__rope_qk_free(r);
        return st;
    }
    r->opts = attn__opts_without_rope(opts);
    return ATTN_OK;
}

/*
 * attn.h: attention mechanisms of the Transformer, in C11.
 *
 * This is the only public header of libattn. Everything public is prefixed
 * attn_ (functions, types) or ATTN_ (macros, enum values).
 *
 * Worked example: causal self-attention over one sequence.
 *
 *     float q[4*8], k[4*8], v[4*8], o[4*8];          // L = 4, D = 8
 *     ... fill q, k, v ...
 *     attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 1, 1, 4, 8);
 *     attn_tensor K = attn_tensor_4d(k, ATTN_F32, 1, 1, 4, 8);
 *     attn_tensor V = attn_tensor_4d(v, ATTN_F32, 1, 1, 4, 8);
 *     attn_tensor O = attn_tensor_4d(o, ATTN_F32, 1, 1, 4, 8);
 *     attn_sdpa_opts opts;
 *     attn_sdpa_opts_init(&opts);          // scale 1/sqrt(D), no mask
 *     opts.mask.causal = ATTN_CAUSAL_TOP_LEFT;
 *     attn_status st = attn_sdpa_forward(&Q, &K, &V, &opts, &O, NULL, NULL);
 *     if (st != ATTN_OK) fprintf(stderr, "%s\n", attn_last_error());
 *
 * Conventions (see docs/ and DESIGN.md):
 *  - Every function returns attn_status; on failure attn_last_error() holds a
 *    thread-local message naming the argument and the numbers. The library
 *    never prints, aborts or exits on a caller's mistake.
 *  - Tensors are views: the caller owns the memory. Shapes are (B, H, L, D)
 *    with strides in elements; a stride of 0 broadcasts.
 *  - Functions that compute gradients ADD into the gradient buffers; zero
 *    them first for a fresh gradient.
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ATTN_API marks the public functions: the only symbols libattn.so exports
 * (the library is built with -fvisibility=hidden). Every public header of
 * attn (attn.h and the per-floor attn_*.h) includes this one for it. */
#ifndef ATTN_API
#if defined(__GNUC__) || defined(__clang__)
#define ATTN_API __attribute__((visibility("default")))
#else
#define ATTN_API
#endif
#endif

#define ATTN_VERSION_MAJOR 0
#define ATTN_VERSION_MINOR 1
#define ATTN_VERSION_PATCH 0

/* ===================================================================== */
/* Status                                                                */
/* ===================================================================== */

/* One value per class of failure. Values are appended, never renumbered. */
typedef enum {
    ATTN_OK = 0,
    ATTN_E_INVALID = 1,     /* invalid argument: null pointer, bad option  */
    ATTN_E_SHAPE = 2,       /* shapes do not agree or are out of range     */
    ATTN_E_DTYPE = 3,       /* element type not accepted here              */
    ATTN_E_UNSUPPORTED = 4, /* valid request this build cannot serve       */
    ATTN_E_NOMEM = 5,       /* an allocation failed or a size overflowed   */
    ATTN_E_IO = 6,          /* a file could not be opened/read/written     */
    ATTN_E_FORMAT = 7,      /* a file's contents are malformed             */
    ATTN_E_NONFINITE = 8    /* NaN or Inf in an input that forbids them    */
} attn_status;

#define ATTN_STATUS_COUNT 9

/* Short name of a status class ("invalid argument", ...). Never NULL. */
const char *attn_strerror(attn_status status);

/* Detail message of the last failure on this thread ("" if none). The
 * pointer stays valid until the next failing call on the same thread. */
const char *attn_last_error(void);

/* Clears the thread's detail message. */
void attn_clear_error(void);

/* Library version as "MAJOR.MINOR.PATCH". */
const char *attn_version(void);

/* Size in bytes of a public struct named by its type name ("attn_tensor",
 * "attn_mask", "attn_sdpa_opts", ...); 0 for NULL or an unknown name.
 * Bindings that mirror the structs (python/attn with ctypes) compare it with
 * their own layout at load time, so a header change cannot go unnoticed. */
size_t attn_sizeof(const char *type_name);

/* ===================================================================== */
/* Element types and tensor views                                        */
/* ===================================================================== */

typedef enum {
    ATTN_F32 = 0,
    ATTN_F16 = 1,  /* IEEE binary16, stored as uint16_t            */
    ATTN_BF16 = 2, /* bfloat16 (upper half of an f32), uint16_t    */
    ATTN_F64 = 3,  /* reference paths and gradient checks          */
    ATTN_U8 = 4,   /* boolean masks: nonzero = true                */
    ATTN_I32 = 5,
    ATTN_I64 = 6,
    ATTN_Q8 = 7    /* KV cache storage only: 8-bit blocks with a scale
                      (attn_cache.h); no tensor view has this dtype     */
} attn_dtype;

#define ATTN_DTYPE_COUNT 8

/* Bytes per element (0 for an unknown dtype, and for ATTN_Q8, a block
 * format: tensor checks refuse views of it). */
size_t attn_dtype_size(attn_dtype dtype);
/* "f32", "f16", "bf16", "f64", "u8", "i32", "i64", "q8" ("?" if unknown). */
const char *attn_dtype_name(attn_dtype dtype);

/* Scalar conversions. f32 -> f16/bf16 round to nearest even; NaN stays NaN
 * and overflow becomes Inf. */
float attn_f16_to_f32(uint16_t h);
uint16_t attn_f32_to_f16(float f);
float attn_bf16_to_f32(uint16_t h);
uint16_t attn_f32_to_bf16(float f);

/* Converts n elements between any two of f32, f16, bf16, f64. */
attn_status attn_convert(const void *src, attn_dtype src_dtype, void *dst,
                         attn_dtype dst_dtype, size_t n);

/* A view of a rank-4 array. shape is (B, H, L, D) for attention inputs.
 * stride[i] is the distance in elements between neighbours along axis i;
 * 0 broadcasts along that axis (only where a function says it may). */
typedef struct {
    void *data;
    attn_dtype dtype;
    int64_t shape[4];
    int64_t stride[4];
} attn_tensor;

/* A contiguous (row-major) view of shape (d0, d1, d2, d3). These
 * constructors cannot fail: a shape with an extent < 1 or too large to
 * address gives a view that attn_tensor_check (and every function taking
 * it) refuses. */
attn_tensor attn_tensor_4d(void *data, attn_dtype dtype, int64_t d0,
                           int64_t d1, int64_t d2, int64_t d3);

/* A view of a batch-first (B, L, H, D) contiguous buffer, presented as
 * (B, H, L, D) through its strides: no copy. */
attn_tensor attn_tensor_bthd(void *data, attn_dtype dtype, int64_t b,
                             int64_t l, int64_t h, int64_t d);

/* Checks a view: data not NULL, shape entries >= 1, strides >= 0, and that
 * the largest element offset and byte size fit in int64/size_t. name is used
 * in the message ("q", "k", ...). */
attn_status attn_tensor_check(const attn_tensor *t, const char *name);

/* Number of elements (product of shape); 0 on overflow or bad shape. */
int64_t attn_tensor_numel(const attn_tensor *t);

/* Reads element (i0,i1,i2,i3) as double, whatever its dtype. No checks. */
double attn_tensor_get(const attn_tensor *t, int64_t i0, int64_t i1,
                       int64_t i2, int64_t i3);

/* ===================================================================== */
/* Masks                                                                 */
/* ===================================================================== */

/* Where the causal diagonal (and the centre of a local window) lies when
 * Lq != Lk. With effective lengths lq, lk of a batch entry, query i sits at
 * key position i (TOP_LEFT, PyTorch is_causal) or i + lk - lq (BOTTOM_RIGHT,
 * FlashAttention and KV caches). */
typedef enum {
    ATTN_ALIGN_TOP_LEFT = 0,
    ATTN_ALIGN_BOTTOM_RIGHT = 1
} attn_align;

/* One mask descriptor, understood by every kernel. All parts combine by AND
 * (a key is visible only if every part keeps it); bias is added to the
 * scaled scores of visible keys. Masked keys are excluded exactly. A query
 * row with no visible key gives output 0, weights 0 and lse -inf.
 *
 * For query i, key j of batch entry b with effective lengths lq, lk (the
 * query/key lengths if given, else Lq, Lk), let c = i (TOP_LEFT) or
 * c = i + lk - lq (BOTTOM_RIGHT). Key j is visible when all hold:
 *   - i < lq and j < lk                            (padding)
 *   - causal: j <= c
 *   - window_left >= 0: j >= c - window_left
 *   - window_right >= 0: j <= c + window_right
 *   - keep tensor: keep[b, h, i, j] != 0 (axes of size 1 broadcast)
 *   - block sparse: layout[h', i / block, j / block] != 0
 *   - random blocks: block (h, i / rb, j / rb) drawn as kept
 */
typedef struct {
    int causal;          /* 0 or 1                                          */
    attn_align align;    /* alignment of causal and window                 */
    int64_t window_left; /* < 0: unbounded (default -1); at most 2^61      */
    int64_t window_right;/* < 0: unbounded (default -1); at most 2^61      */

    const int64_t *key_lengths;   /* [B] valid keys per batch entry, or NULL   */
    const int64_t *query_lengths; /* [B] valid queries per entry, or NULL      */

    /* Boolean keep-mask of shape (B, H, Lq, Lk) where any axis may instead
     * have size 1 (or stride 0) to broadcast, e.g. a key-padding mask
     * (B, 1, 1, Lk); dtype u8, i32 or f32, nonzero = attend. NULL: none. */
    const attn_tensor *keep;

    /* Additive float bias (f32 or f64), same shape rules as keep. Added to
     * scale * q.k. -inf entries mask exactly; NaN and +inf are refused.
     * NULL: none. */
    const attn_tensor *bias;

    /* Block-sparse layout: block_size > 0 enables it. layout is u8 of shape
     * (layout_heads, ceil(Lq / block_size), ceil(Lk / block_size)),
     * row-major; layout_heads is 1 (shared by all heads) or H. */
    int64_t block_size;
    const uint8_t *layout;
    int64_t layout_heads;

    /* Seeded random blocks: random_block > 0 enables it. Block
     * (h, i / random_block, j / random_block) is kept with probability
     * random_keep_p, drawn from a counter-based hash of (random_seed, h,
     * block row, block column): the same pattern for every batch entry, in
     * every kernel, on any thread count. */
    int64_t random_block;
    double random_keep_p;
    uint64_t random_seed;
} attn_mask;

/* No masking: every key visible, windows unbounded. */
void attn_mask_init(attn_mask *mask);

/* Checks a mask against the attention shapes (B, H, Lq, Lk). */
attn_status attn_mask_check(const attn_mask *mask, int64_t B, int64_t H,
                            int64_t Lq, int64_t Lk);

/* 1 if key j is visible from query i of (b, h) under mask, else 0 (the
 * bias is not looked at). Bounds are not checked: call attn_mask_check. */
int attn_mask_visible(const attn_mask *mask, int64_t b, int64_t h,
                      int64_t i, int64_t j, int64_t Lq, int64_t Lk);

/* Whether the random-block pattern keeps block (h, bi, bj). */
int attn_random_block_kept(uint64_t seed, double keep_p, int64_t h,
                           int64_t bi, int64_t bj);

/* --- Builders for the tutorials' conventions (all write u8, 1 = attend) */

/* Padding from token ids: keep[b, j] = (ids[b, j] != pad_id), for ids of
 * shape (B, L) row-major. The result is (B, L) u8: view it as a keep tensor
 * of shape (B, 1, Lq, L) with strides (L, 0, 0, 1). */
attn_status attn_mask_padding_from_ids(const int64_t *ids, int64_t B,
                                       int64_t L, int64_t pad_id,
                                       uint8_t *keep);

/* Look-ahead mask (Lq, Lk) u8 with top-left alignment: keep[i, j] = j <= i. */
attn_status attn_mask_lookahead(int64_t Lq, int64_t Lk, uint8_t *keep);

/* Keras/TF convention (1 = masked, added as -1e9 there) to keep: n elements
 * of src (dtype u8, i32, i64, f32 or f64; others are ATTN_E_DTYPE),
 * keep = (src == 0). */
attn_status attn_mask_from_keras(const void *src, attn_dtype dtype, size_t n,
                                 uint8_t *keep);

/* PyTorch nn.MultiheadAttention convention (True = blocked) to keep, with
 * the dtypes of attn_mask_from_keras. */
attn_status attn_mask_from_torch_mha(const void *src, attn_dtype dtype,
                                     size_t n, uint8_t *keep);

/* ===================================================================== */
/* Scaled dot-product attention                                          */
/* ===================================================================== */

typedef enum {
    ATTN_IMPL_AUTO = 0,  /* the fastest correct kernel (flash)          */
    ATTN_IMPL_REF = 1,   /* the exact reference, double accumulation    */
    ATTN_IMPL_FLASH = 2  /* the tiled, multithreaded online-softmax one */
} attn_impl;

typedef struct {
    double scale;     /* multiplier of q.k; 0 means 1/sqrt(Dk)            */
    attn_mask mask;
    double dropout_p; /* probability of dropping a weight, in [0, 1)     */
    uint64_t seed;    /* dropout seed                                    */
    attn_impl impl;
    int threads;      /* 0: OpenMP's default                             */
} attn_sdpa_opts;

/* Defaults: scale 1/sqrt(Dk), no mask, no dropout, AUTO, default threads. */
void attn_sdpa_opts_init(attn_sdpa_opts *opts);

/*
 * O = softmax(scale * Q K^T + bias, masked) V, with optional dropout on the
 * weights (kept weights scaled by 1 / (1 - p)).
 *
 *   q   (B, H,   Lq, Dk)   f32, f16, bf16 (f64 with IMPL_REF)
 *   k   (B, Hkv, Lk, Dk)   same dtype as q; H % Hkv == 0 (grouped heads)
 *   v   (B, Hkv, Lk, Dv)   same dtype as q
 *   out (B, H,   Lq, Dv)   f32 (f64 with IMPL_REF), overwritten
 *   weights (B, H, Lq, Lk) f32/f64 or NULL: the weights after dropout,
 *                          overwritten; forces materialization
 *   lse [B * H * Lq] contiguous or NULL: log-sum-exp of each row's scaled,
 *                    biased, masked scores (-inf for a fully masked row);
 *                    backward needs it.
 * Errors: ATTN_E_INVALID (null pointers, bad options), ATTN_E_SHAPE,
 * ATTN_E_DTYPE, ATTN_E_NONFINITE (NaN/Inf in q, k or v), ATTN_E_NOMEM,
 * ATTN_E_UNSUPPORTED (f64 tensors without IMPL_REF; Dk or Dv beyond what
 * the flash kernel's BLAS calls take).
 */
attn_status attn_sdpa_forward(const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_sdpa_opts *opts,
                              attn_tensor *out, attn_tensor *weights,
                              float *lse);

/* Gradients of attn_sdpa_forward. out and lse are those forward produced
 * with the same q, k, v and opts (the same dropout seed gives the same
 * mask). dq (B,H,Lq,Dk), dk (B,Hkv,Lk,Dk), dv (B,Hkv,Lk,Dv) are f32 (f64
 * with IMPL_REF) and ADDED INTO. dbias, if not NULL, has the bias's shape
 * with its own strides; entries broadcast by the bias (stride 0) receive
 * the sum over the broadcast axes; added into.
 *
 *   out, dout (B, H, Lq, Dv)  f32 (f64 with IMPL_REF), read only
 *   lse [B * H * Lq]          from forward; may be NULL with IMPL_REF only
 *
 * With grouped heads dk and dv sum over the heads of each group. A fully
 * masked query row contributes nothing (zero, finite gradients). IMPL_REF
 * recomputes the weights in double from q, k, v and the mask and reads
 * neither out nor lse, so a double gradient check sees no f32 rounding.
 * The gradient buffers must not overlap the inputs.
 * Errors: as attn_sdpa_forward, and ATTN_E_INVALID for a missing lse or a
 * dbias without mask.bias, ATTN_E_NONFINITE for NaN/Inf in dout. */
attn_status attn_sdpa_backward(const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_tensor *out,
                               const float *lse, const attn_tensor *dout,
                               const attn_sdpa_opts *opts, attn_tensor *dq,
                               attn_tensor *dk, attn_tensor *dv,
                               attn_tensor *dbias);

/* Receives one tile of normalized attention weights (before dropout): rows
 * q0 .. q0+nq-1, columns k0 .. k0+nk-1 of head (b, h); w[r * ldw + c].
 * Masked entries are 0. Return nonzero to stop early (the call then
 * returns ATTN_OK). Tiles of one (b, h) arrive in row-major tile order; the
 * callback is called from one thread at a time. */
typedef int (*attn_weight_tile_fn)(void *user, int64_t b, int64_t h,
                                   int64_t q0, int64_t nq, int64_t k0,
                                   int64_t nk, const float *w, int64_t ldw);

/* Streams the weights of attention through fn without the Lq x Lk matrix,
 * using lse saved by attn_sdpa_forward with the same q, k, opts. Every
 * entry is delivered exactly once (tiles the mask hides arrive as zeros).
 * The weights are exp(s - lse): they carry lse's f32 rounding, a relative
 * error of about |lse| x 6e-8 (the weights output of attn_sdpa_forward
 * does not). q and k are f32, f16 or bf16 (f64 is ATTN_E_DTYPE); opts.impl
 * and the dropout options are not used. Errors: those of
 * attn_sdpa_forward; ATTN_E_INVALID for a NULL lse or fn. */
attn_status attn_sdpa_weight_tiles(const attn_tensor *q, const attn_tensor *k,
                                   const float *lse, const attn_sdpa_opts *opts,
                                   attn_weight_tile_fn fn, void *user);

/* Dropout keep decision for weight (b, h, i, j): Philox4x32-10 keyed by
 * seed. 1 = kept. Exposed so tests and users can reproduce the mask. */
int attn_dropout_kept(uint64_t seed, double p, int64_t b, int64_t h,
                      int64_t i, int64_t j);

/* ===================================================================== */
/* .npy files                                                            */
/* ===================================================================== */

#define ATTN_NPY_MAX_DIMS 8

/* An array read from or written to a .npy file. data is owned by the
 * struct when read (free with attn_npy_free). */
typedef struct {
    attn_dtype dtype;
    int ndim;
    int64_t shape[ATTN_NPY_MAX_DIMS];
    void *data;
} attn_npy;

/* Reads a version 1.0/2.0/3.0 .npy file, C order, little-endian. Accepted:
 * <f4 (f32), <f2 (f16), <f8 (f64, kept as f64), <i4 (i32), <i8 (i64), |u1
 * and |b1 (u8; also spelt <u1, <b1). Anything else (big-endian '>f4',
 * Fortran order, other dtypes, more than ATTN_NPY_MAX_DIMS dimensions, a
 * malformed header dict) or a file whose header disagrees with its size in
 * either direction (truncated data, trailing bytes) is ATTN_E_FORMAT; a file
 * that cannot be opened or read is ATTN_E_IO. Nothing larger than the file
 * is ever allocated. Zero-size arrays (a 0 in the shape) are accepted (data
 * is then a valid pointer to no elements); attention calls refuse them.
 * On failure *arr is zeroed. */
attn_status attn_npy_read(const char *path, attn_npy *arr);

/* Writes arr as a version 1.0 .npy file (2.0 if the header needs it), data
 * aligned to 64 bytes as NumPy does. dtype f32, f16, f64, i32, i64 or u8
 * (written as |u1); bf16 has no NumPy dtype and is ATTN_E_DTYPE. On a
 * failed write the partial file is removed (ATTN_E_IO). */
attn_status attn_npy_write(const char *path, const attn_npy *arr);

/* Frees data read by attn_npy_read and zeroes the struct. NULL is fine. */
void attn_npy_free(attn_npy *arr);

/* Converts arr in place to dtype, replacing its data:
 *  - to f32/f64/f16/bf16: from any dtype (values rounded as needed);
 *  - to u8: a boolean, nonzero (and NaN) -> 1, zero -> 0;
 *  - to i32/i64: each value must be an exact integer within the target's
 *    range (floats like 3.0 are fine, 2.5 is ATTN_E_INVALID).
 * arr must own its data (from attn_npy_read or an earlier convert): the
 * old buffer is freed as attn_npy_free would. */
attn_status attn_npy_convert(attn_npy *arr, attn_dtype dtype);

/* ===================================================================== */
/* Layers (issue 5): additive attention, multi-head attention, encoder   */
/* ===================================================================== */
/*
 * Conventions of the layers:
 *  - Activations are contiguous, row-major, batch-first f32 arrays:
 *    a sequence input is (B, L, features). The caller owns them.
 *  - Parameters of a layer live in ONE contiguous f32 block; the layer's
 *    *_param_count gives its length and *_params_view gives named pointers
 *    (slices) into it. A gradient block has the same layout: view it with
 *    the same function. Matrices are (out_features, in_features), as
 *    PyTorch's nn.Linear: y = x W^T + b.
 *  - Forward writes what backward needs into a caller-owned workspace of
 *    *_workspace_size floats; backward reads it (unchanged since forward,
 *    same params, inputs and opts) and uses the rest as scratch. One
 *    workspace per layer call in flight; reuse it across steps.
 *  - Backward ADDS into the gradient block and into the input gradients
 *    (zero them first for a fresh gradient). Input-gradient pointers may be
 *    NULL (not wanted) and may alias each other (self-attention: dq, dk and
 *    dv the same buffer): contributions are added one after the other.
 *  - Options are attn_layer_opts (= attn_sdpa_opts): the mask over
 *    (B, H, Lq, Lk) (H = 1 for additive attention), dropout_p (> 0 in
 *    training; every dropout site of a layer uses it), the dropout seed,
 *    impl (ATTN_IMPL_REF: double reference paths; AUTO/FLASH: fast paths)
 *    and threads. scale: 0 means 1/sqrt(head_dim) for dot-product and 1 for
 *    additive attention.
 *  - Results are bitwise identical for any thread count.
 *  - Errors: ATTN_E_INVALID (NULL pointers, bad config or options),
 *    ATTN_E_SHAPE (lengths < 1, mask shapes), ATTN_E_NONFINITE (NaN/Inf in
 *    inputs), ATTN_E_NOMEM (size overflow).
 */

typedef attn_sdpa_opts attn_layer_opts;

/* Initial values of a parameter slice (used by attn_params_init). */
typedef enum {
    ATTN_INIT_XAVIER = 0, /* uniform(+-sqrt(6 / (fan_in + fan_out)))       */
    ATTN_INIT_ZERO = 1,   /* biases, LayerNorm beta                       */
    ATTN_INIT_ONE = 2     /* LayerNorm gamma                              */
} attn_init_kind;

#define ATTN_SLICE_NAME_MAX 48

/* One named slice of a parameter block: block[offset .. offset+numel). A
 * vector has shape {n, 1}; fan_in = shape[1], fan_out = shape[0]. */
typedef struct {
    char name[ATTN_SLICE_NAME_MAX]; /* e.g. "layers.0.attn.w_q"            */
    int64_t offset;                 /* in floats from the block's start    */
    int64_t shape[2];               /* (out, in) for a matrix, (n, 1) else */
    attn_init_kind init;
} attn_param_slice;

/* Fills block[0 .. sum of slices) slice by slice from seed: Xavier-uniform
 * drawn from a counter-based generator keyed by (seed, slice index,
 * element), zeros, ones. The same seed gives the same block on any thread
 * count and whatever other slices exist. */
attn_status attn_params_init(const attn_param_slice *slices, int64_t nslices,
                             float *block, uint64_t seed);

/* --- Additive (Bahdanau) attention ----------------------------------- */
/*
 * score(i, j) = scale * v . tanh(W_q q_i + b_q + W_k k_j + b_k) (+ mask
 * bias), weights = softmax over visible keys (dropout after), context_i =
 * sum_j weights_ij * val_j where val = V, or the projected keys
 * W_k k_j + b_k when context_from_keys (the tutorial's variant).
 * The fast path streams key tiles with an online softmax and never holds
 * the (B, Lq, Lk, A) tensor; the reference (impl REF) materializes it in
 * double.
 */
typedef struct {
    int64_t query_dim;     /* Dq: features of a query                      */
    int64_t key_dim;       /* Dk: features of a key                        */
    int64_t value_dim;     /* Dv: features of a value (unused if keys)     */
    int64_t attn_dim;      /* A: hidden size of the score network          */
    int bias;              /* 1: b_q and b_k exist                         */
    int context_from_keys; /* 1: context = weights x (W_k k + b_k), size A */
} attn_additive_config;

typedef struct {
    float *w_q; /* (A, Dq)          */
    float *w_k; /* (A, Dk)          */
    float *v;   /* (A)              */
    float *b_q; /* (A), NULL if !bias */
    float *b_k; /* (A), NULL if !bias */
} attn_additive_params;

/* Features of the context: A if context_from_keys, else Dv. */
int64_t attn_additive_out_dim(const attn_additive_config *cfg);
/* Number of floats of the parameter block (0 for an invalid config). */
int64_t attn_additive_param_count(const attn_additive_config *cfg);
/* Named pointers into block (params or gradients) in the layout order
 * w_q, w_k, v, b_q, b_k. */
attn_status attn_additive_params_view(const attn_additive_config *cfg,
                                      float *block, attn_additive_params *p);
/* Slice table: writes at most cap entries, *count = the number needed.
 * prefix ("" or e.g. "layers.0.attn.") is prepended to names. */
attn_status attn_additive_param_slices(const attn_additive_config *cfg,
                                       const char *prefix, int64_t offset,
                                       attn_param_slice *slices, int64_t cap,
                                       int64_t *count);
/* Xavier init of the whole block (biases 0) from seed. */
attn_status attn_additive_init(const attn_additive_config *cfg, float *params,
                               uint64_t seed);
attn_status attn_additive_workspace_size(const attn_additive_config *cfg,
                                         int64_t B, int64_t Lq, int64_t Lk,
                                         size_t *floats);
/*
 *   q (B, Lq, Dq), k (B, Lk, Dk), v (B, Lk, Dv) (NULL if context_from_keys)
 *   out     (B, Lq, out_dim)  overwritten
 *   weights (B, Lq, Lk) or NULL: weights after dropout, overwritten
 *   ws      workspace_size floats: saved for backward
 * A query row with no visible key gives context 0 and weights 0.
 */
attn_status attn_additive_forward(const attn_additive_config *cfg,
                                  const float *params, int64_t B, int64_t Lq,
                                  int64_t Lk, const float *q, const float *k,
                                  const float *v, const attn_layer_opts *opts,
                                  float *out, float *weights, float *ws);
/* dout (B, Lq, out_dim). grads (param_count floats), dq, dk, dv: ADDED
 * INTO; any may be NULL. */
attn_status attn_additive_backward(const attn_additive_config *cfg,
                                   const float *params, int64_t B, int64_t Lq,
                                   int64_t Lk, const float *q, const float *k,
                                   const float *v, const attn_layer_opts *opts,
                                   const float *dout, float *ws, float *grads,
                                   float *dq, float *dk, float *dv);

/* --- Multi-head attention -------------------------------------------- */
/*
 * Q = query W_q^T + b_q split into H heads of hd = d_model / H features;
 * K = key W_k^T + b_k and V = value W_v^T + b_v into Hkv heads (grouped
 * query attention: head h reads kv head h / (H / Hkv)); per head
 * softmax(scale Q K^T + mask) V through attn_sdpa_forward; heads merged
 * and out = merged W_o^T + b_o.
 */
typedef struct {
    int64_t d_model;      /* E: query features = output features           */
    int64_t num_heads;    /* H, divides E; hd = E / H                      */
    int64_t num_kv_heads; /* Hkv, divides H; 0 means H                     */
    int64_t kdim;         /* key features; 0 means E (cross-attention)     */
    int64_t vdim;         /* value features; 0 means E                     */
    int bias;             /* 1: b_q, b_k, b_v, b_o exist                   */
} attn_mha_config;

typedef struct {
    float *w_q; /* (E, E)                           */
    float *w_k; /* (Hkv * hd, kdim)                 */
    float *w_v; /* (Hkv * hd, vdim)                 */
    float *w_o; /* (E, E)                           */
    float *b_q; /* (E), NULL if !bias               */
    float *b_k; /* (Hkv * hd), NULL if !bias        */
    float *b_v; /* (Hkv * hd), NULL if !bias        */
    float *b_o; /* (E), NULL if !bias               */
} attn_mha_params;

/* How attn_mha_forward returns weights. */
typedef enum {
    ATTN_WEIGHTS_PER_HEAD = 0, /* (B, H, Lq, Lk)                          */
    ATTN_WEIGHTS_AVERAGED = 1  /* (B, Lq, Lk), mean over heads             */
} attn_weights_mode;

int64_t attn_mha_param_count(const attn_mha_config *cfg);
/* layout order: w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o */
attn_status attn_mha_params_view(const attn_mha_config *cfg, float *block,
                                 attn_mha_params *p);
attn_status attn_mha_param_slices(const attn_mha_config *cfg,
                                  const char *prefix, int64_t offset,
                                  attn_param_slice *slices, int64_t cap,
                                  int64_t *count);
attn_status attn_mha_init(const attn_mha_config *cfg, float *params,
                          uint64_t seed);
attn_status attn_mha_workspace_size(const attn_mha_config *cfg, int64_t B,
                                    int64_t Lq, int64_t Lk, size_t *floats);
/*
 *   query (B, Lq, E), key (B, Lk, kdim), value (B, Lk, vdim); for
 *   self-attention pass the same pointer three times.
 *   out (B, Lq, E) overwritten; weights NULL or (see mode) overwritten,
 *   after dropout; ws: workspace_size floats, saved for backward.
 */
attn_status attn_mha_forward(const attn_mha_config *cfg, const float *params,
                             int64_t B, int64_t Lq, int64_t Lk,
                             const float *query, const float *key,
                             const float *value, const attn_layer_opts *opts,
                             float *out, float *weights,
                             attn_weights_mode mode, float *ws);
/* dout (B, Lq, E); grads, dquery, dkey, dvalue ADDED INTO (NULL: skip). */
attn_status attn_mha_backward(const attn_mha_config *cfg, const float *params,
                              int64_t B, int64_t Lq, int64_t Lk,
                              const float *query, const float *key,
                              const float *value, const attn_layer_opts *opts,
                              const float *dout, float *ws, float *grads,
                              float *dquery, float *dkey, float *dvalue);

/* --- Building blocks: linear, LayerNorm, positions -------------------- */

/* y (n, out) = x (n, in) W^T (W is (out, in)) + b (out, or NULL);
 * overwritten. */
attn_status attn_linear_forward(int64_t n, int64_t in, int64_t out,
                                const float *x, const float *w,
                                const float *b, float *y);
/* dW (out, in) += dy^T x; db (out) += column sums of dy; dx (n, in) +=
 * dy W. Any of dw, db, dx may be NULL. */
attn_status attn_linear_backward(int64_t n, int64_t in, int64_t out,
                                 const float *x, const float *w,
                                 const float *dy, float *dw, float *db,
                                 float *dx);
/* y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis of n
 * rows of d features; mean and rstd (n each) saved for backward. */
attn_status attn_layernorm_forward(int64_t n, int64_t d, const float *x,
                                   const float *gamma, const float *beta,
                                   double eps, float *y, float *mean,
                                   float *rstd);
/* dgamma, dbeta (d) and dx (n, d) ADDED INTO (NULL: skip). */
attn_status attn_layernorm_backward(int64_t n, int64_t d, const float *x,
                                    const float *gamma, const float *mean,
                                    const float *rstd, const float *dy,
                                    float *dgamma, float *dbeta, float *dx);
/* pe (L, d_model): pe[p, 2i] = sin(p / 10000^(2i / d_model)),
 * pe[p, 2i+1] = cos(same angle); overwritten. */
attn_status attn_positional_encoding(int64_t L, int64_t d_model, float *pe);
/* x (B, L, d_model) += pe, in place. */
attn_status attn_add_positional_encoding(int64_t B, int64_t L,
                                         int64_t d_model, float *x);

/* --- Transformer encoder (a stack of N layers) ------------------------ */

typedef enum {
    ATTN_ATTENTION_DOT = 0,     /* multi-head scaled dot-product            */
    ATTN_ATTENTION_ADDITIVE = 1 /* single-head additive + output projection */
} attn_attention_type;

typedef enum {
    ATTN_ACT_RELU = 0,
    ATTN_ACT_GELU = 1 /* exact: x * Phi(x) (erf)                          */
} attn_activation;

/*
 * One layer, post-norm (norm_first = 0, the tutorials, PyTorch default):
 *   x = LN1(x + drop(SA(x)));  x = LN2(x + drop(FFN(x)))
 * pre-norm (norm_first = 1):
 *   x = x + drop(SA(LN1(x)));  x = x + drop(FFN(LN2(x)))
 * FFN(x) = W_2 drop(act(W_1 x + b_1)) + b_2. SA is multi-head attention
 * (dot) or, for additive, out = W_o (AddAttn(q=k=v=x)) + b_o with the
 * context taken from the values (the inputs themselves). Dropout of
 * attention weights, of SA and FFN outputs and inside the FFN all use
 * opts->dropout_p, each site with its own counter-based stream derived from
 * opts->seed and the layer index (deterministic on any thread count).
 * The stack applies num_layers such layers, then a LayerNorm if
 * final_norm (usual with pre-norm).
 */
typedef struct {
    int64_t num_layers;          /* N >= 1                                  */
    int64_t d_model;             /* E                                       */
    int64_t num_heads;           /* H (dot); ignored for additive (1 head)  */
    int64_t num_kv_heads;        /* 0 means H                               */
    int64_t dim_feedforward;     /* F                                       */
    attn_attention_type attention;
    int64_t additive_dim;        /* A for additive; 0 means E / 2           */
    attn_activation activation;
    int norm_first;              /* 0 post-norm, 1 pre-norm                 */
    int final_norm;              /* 1: LayerNorm after the last layer       */
    double layer_norm_eps;       /* 0 means 1e-5                            */
} attn_encoder_config;

/* Defaults: 1 layer, E 512, 8 heads, F 2048, dot, ReLU, post-norm. */
void attn_encoder_config_init(attn_encoder_config *cfg);

typedef struct {
    attn_mha_params mha;           /* attention == DOT, else all NULL      */
    attn_additive_params additive; /* attention == ADDITIVE, else NULL     */
    float *w_o;                    /* (E, E) additive only, else NULL      */
    float *b_o;                    /* (E)    additive only, else NULL      */
    float *ln1_gamma, *ln1_beta;   /* (E)                                  */
    float *w_1;                    /* (F, E)                               */
    float *b_1;                    /* (F)                                  */
    float *w_2;                    /* (E, F)                               */
    float *b_2;                    /* (E)                                  */
    float *ln2_gamma, *ln2_beta;   /* (E)                                  */
} attn_encoder_layer_params;

/* Block layout: layer 0, layer 1, ..., then final gamma, beta (E each) if
 * final_norm. Each layer: its attention block (MHA layout with bias, or
 * additive layout with bias followed by w_o, b_o), ln1_gamma, ln1_beta,
 * w_1, b_1, w_2, b_2, ln2_gamma, ln2_beta. */
int64_t attn_encoder_param_count(const attn_encoder_config *cfg);
attn_status attn_encoder_layer_view(const attn_encoder_config *cfg,
                                    float *block, int64_t layer,
                                    attn_encoder_layer_params *p);
/* gamma, beta of the final norm (NULL if !final_norm). */
attn_status attn_encoder_final_norm_view(const attn_encoder_config *cfg,
                                         float *block, float **gamma,
                                         float **beta);
attn_status attn_encoder_param_slices(const attn_encoder_config *cfg,
                                      const char *prefix, int64_t offset,
                                      attn_param_slice *slices, int64_t cap,
                                      int64_t *count);
attn_status attn_encoder_init(const attn_encoder_config *cfg, float *params,
                              uint64_t seed);
attn_status attn_encoder_workspace_size(const attn_encoder_config *cfg,
                                        int64_t B, int64_t L, size_t *floats);
/* Heads of the attention weights per layer: H (dot) or 1 (additive). */
int64_t attn_encoder_weight_heads(const attn_encoder_config *cfg);
/*
 *   x (B, L, E) input (add positions first if wanted), out (B, L, E)
 *   overwritten (may not alias x). weights NULL or (N, B, Hw, L, L) with
 *   Hw = attn_encoder_weight_heads: every layer's attention weights after
 *   dropout, overwritten. opts->mask is over (B, Hw, L, L): key_lengths for
 *   padding, causal for look-ahead. ws: workspace_size floats.
 */
attn_status attn_encoder_forward(const attn_encoder_config *cfg,
                                 const float *params, int64_t B, int64_t L,
                                 const float *x, const attn_layer_opts *opts,
                                 float *out, float *weights, float *ws);
/* The attention weights (B, Hw, L, L) of one layer, recomputed from what
 * the last forward saved in ws (dropout not applied). Overwritten. */
attn_status attn_encoder_layer_weights(const attn_encoder_config *cfg,
                                       const float *params, int64_t B,
                                       int64_t L, const attn_layer_opts *opts,
                                       const float *ws, int64_t layer,
                                       float *weights);
/* dout (B, L, E); grads (param_count floats) and dx (B, L, E, or NULL)
 * ADDED INTO. */
attn_status attn_encoder_backward(const attn_encoder_config *cfg,
                                  const float *params, int64_t B, int64_t L,
                                  const float *x, const attn_layer_opts *opts,
                                  const float *dout, float *ws, float *grads,
                                  float *dx);

/* --- Parameter files -------------------------------------------------- */
/*
 * A parameter file holds a kind ("additive", "mha", "encoder", or any
 * short name a caller picks), a config of up to ATTN_PARAMS_MAX_CONFIG
 * int64 values (doubles stored by bit pattern), the slice table and the
 * f32 block, closed by a CRC32; docs/params-format.md gives the layout.
 * Files are written to a temporary name, flushed and renamed (atomic).
 * A truncated, corrupted (CRC), wrong-version or wrong-kind file, or one
 * whose slices disagree with the config, is ATTN_E_FORMAT.
 */
#define ATTN_PARAMS_MAX_CONFIG 32
#define ATTN_PARAMS_KIND_MAX 16

typedef struct {
    char kind[ATTN_PARAMS_KIND_MAX]; /* NUL-terminated                      */
    int32_t config_len;              /* <= ATTN_PARAMS_MAX_CONFIG           */
    int64_t config[ATTN_PARAMS_MAX_CONFIG];
} attn_params_header;

/* Generic: writes header, slices and count floats of block. */
attn_status attn_params_save(const char *path, const attn_params_header *hdr,
                             const attn_param_slice *slices, int64_t nslices,
                             const float *block, int64_t count);
/* Generic: reads a file; *block and *slices are allocated (free with
 * attn_params_free). */
attn_status attn_params_load(const char *path, attn_params_header *hdr,
                             attn_param_slice **slices, int64_t *nslices,
                             float **block, int64_t *count);
void attn_params_free(void *p);

/* Typed: save a layer's block; load a file of that kind, returning its
 * config and a newly allocated block (attn_params_free). */
attn_status attn_additive_save(const char *path,
                               const attn_additive_config *cfg,
                               const float *params);
attn_status attn_additive_load(const char *path, attn_additive_config *cfg,
                               float **params);
attn_status attn_mha_save(const char *path, const attn_mha_config *cfg,
                          const float *params);
attn_status attn_mha_load(const char *path, attn_mha_config *cfg,
                          float **params);
attn_status attn_encoder_save(const char *path, const attn_encoder_config *cfg,
                              const float *params);
attn_status attn_encoder_load(const char *path, attn_encoder_config *cfg,
                              float **params);

/* ===================================================================== */
/* Pictures and diagnostics (issue 6)                                    */
/* ===================================================================== */

/*
 * Everything here READS weights; nothing computes attention. A "map" is the
 * 2-D slice w[b, h, :, :] of a weights tensor of shape (N, H, Lq, Lk): rows
 * are queries, columns keys, and the first axis is the batch entry or the
 * layer. Maps may be f32, f64, f16 or bf16, with any strides.
 *
 * Pictures are drawn with cairo; the file's extension picks the format:
 * .png, .svg or .pdf (anything else is ATTN_E_INVALID). Text uses the
 * DejaVu Sans font (Debian fonts-dejavu-core). SVG files carry their labels
 * twice: as glyph outlines that draw them, and as an invisible <text> layer
 * that makes them searchable and selectable (cairo itself writes only
 * outlines). Pictures and HTML pages are drawn in memory and written to a
 * temporary name, then renamed: a failed call never leaves half a file.
 *
 * Example: an annotated heatmap of a 3 x 3 map with token labels.
 *
 *     const char *tok[3] = {"I", "like", "tea"};
 *     attn_tensor W = attn_tensor_4d(w, ATTN_F32, 1, 1, 3, 3);
 *     attn_heatmap_opts ho;
 *     attn_heatmap_opts_init(&ho);
 *     ho.title = "self-attention"; ho.x_labels = tok; ho.y_labels = tok;
 *     attn_status st = attn_heatmap_write("w.png", &W, 0, 0, &ho);
 */

/* Colour maps: viridis for weights, a blue-white-red diverging one for
 * differences (white at the middle of the scale). */
typedef enum {
    ATTN_CMAP_VIRIDIS = 0,
    ATTN_CMAP_DIVERGING = 1
} attn_colormap;

/* Colours of cells that are not values, as 0xRRGGBB. */
#define ATTN_RGB_NAN 0xff00ffu    /* NaN or Inf: magenta               */
#define ATTN_RGB_MASKED 0x8c8c8cu /* masked by the mask given: grey    */

/* sRGB colour of t in [0, 1] (clamped) under cmap; a NaN t gives
 * ATTN_RGB_NAN. Errors: ATTN_E_INVALID (rgb NULL, unknown cmap). */
attn_status attn_colormap_rgb(attn_colormap cmap, double t, uint8_t rgb[3]);

typedef struct {
    const char *title;   /* over the figure; NULL: none                    */
    const char *x_title; /* under the columns; NULL: "key", "": none       */
    const char *y_title; /* left of the rows; NULL: "query", "": none      */
    /* Token labels: x_labels[Lk] for the columns, y_labels[Lq] for the
     * rows, or NULL for position ticks. Long column labels are rotated. */
    const char *const *x_labels;
    const char *const *y_labels;
    attn_colormap cmap;  /* default VIRIDIS                               */
    /* Colour scale. vmin >= vmax (the default 0, 0): from the data, with 0
     * as the low end for VIRIDIS when no value is negative, and symmetric
     * around 0 for DIVERGING. */
    double vmin, vmax;
    int annotate;  /* values in cells: -1 auto (maps up to 12 x 12), 0, 1  */
    int max_cells; /* most cells drawn per side (default 512, 8..4096);
                      longer axes are averaged in blocks                  */
    int cell_px;   /* side of a cell in pixels; 0: auto from the size      */
    int colorbar;  /* 1 (default): draw the colour bar with ticks          */
    /* Positions the columns and rows stand for (0: Lk and Lq). Set them
     * when the map is already block-averaged (attn_blockavg) so that the
     * ticks read positions of the full sequence. */
    int64_t x_extent, y_extent;
    /* Cells that this mask hides are drawn in ATTN_RGB_MASKED and left out
     * of block averages and of the automatic colour scale. NULL: none.
     * It is checked against the map tensor's (N, H, Lq, Lk). */
    const attn_mask *mask;
} attn_heatmap_opts;

/* Defaults as described above. */
void attn_heatmap_opts_init(attn_heatmap_opts *opts);

/* Draws the map w[b, h] to path. Errors: ATTN_E_INVALID (NULL arguments,
 * unknown extension, bad options), ATTN_E_SHAPE (b, h out of range, mask
 * shapes), ATTN_E_DTYPE, ATTN_E_IO (the file could not be written),
 * ATTN_E_NOMEM. */
attn_status attn_heatmap_write(const char *path, const attn_tensor *w,
                               int64_t b, int64_t h,
                               const attn_heatmap_opts *opts);

/* Where attn_heatmap_write puts things, for overlays and tests: the
 * picture's size in pixels, the top-left corner of the map's first cell,
 * the side of a cell, the cells drawn (after block averaging) and the
 * colour scale used. */
typedef struct {
    int width, height;
    double map_x, map_y, cell;
    int64_t rows, cols;
    double vmin, vmax;
} attn_heatmap_box;

/* The geometry attn_heatmap_write would use for the same arguments; draws
 * nothing. Errors as attn_heatmap_write. */
attn_status attn_heatmap_measure(const attn_tensor *w, int64_t b, int64_t h,
                                 const attn_heatmap_opts *opts,
                                 attn_heatmap_box *box);

/* One panel of a composite figure: the map w[b, h] with its own title
 * (NULL: none) and mask (NULL: opts->mask). */
typedef struct {
    const attn_tensor *w;
    int64_t b, h;
    const char *title;
    const attn_mask *mask;
} attn_panel;

/* Draws n panels in a grid of ncols columns with ONE shared colour scale
 * and one colour bar (scaled vs unscaled side by side, heads x layers).
 * opts->title heads the figure; its labels apply to every panel, which then
 * must all have the same Lq and Lk. */
attn_status attn_figure_write(const char *path, const attn_panel *panels,
                              int n, int ncols, const attn_heatmap_opts *opts);

/* Every map of w (N, H, Lq, Lk) as a grid: one row per layer (first axis),
 * one column per head (a single layer of more than 4 heads wraps onto two
 * rows), shared colour scale. */
attn_status attn_heatmap_grid_write(const char *path, const attn_tensor *w,
                                    const attn_heatmap_opts *opts);

/* The difference a - b of two weight tensors of the same shape, every
 * map in a grid as attn_heatmap_grid_write, in the DIVERGING colour map
 * with a scale symmetric around 0 (unless opts->vmin < opts->vmax). */
attn_status attn_diff_write(const char *path, const attn_tensor *a,
                            const attn_tensor *b,
                            const attn_heatmap_opts *opts);

/* The geometry of a dot product in 2-D: arrows from the origin to a and b
 * on a grid, a legend with their names (NULL: "a", "b"), and the dot
 * product and cosine in the title. A zero vector has no cosine ("n/a"). */
attn_status attn_geometry_write(const char *path, const double a[2],
                                const double b[2], const char *a_name,
                                const char *b_name);

/* --- Long sequences: block averages of streamed weight tiles --------- */

/* Accumulates the tiles of ONE map (b, h) of an Lq x Lk attention into
 * block averages of at most max_cells x max_cells, so that a heatmap of
 * L = 16384 never holds the L x L matrix. Feed it with
 * attn_sdpa_weight_tiles(..., attn_blockavg_tile, acc). */
typedef struct attn_blockavg attn_blockavg;

/* Errors: ATTN_E_INVALID (NULL out, sizes < 1, max_cells < 1),
 * ATTN_E_NOMEM. */
attn_status attn_blockavg_create(int64_t Lq, int64_t Lk, int64_t b,
                                 int64_t h, int64_t max_cells,
                                 attn_blockavg **out);
void attn_blockavg_free(attn_blockavg *acc);

/* An attn_weight_tile_fn: adds the tile to the blocks if (b, h) is the
 * accumulator's map; tiles of other maps are ignored. Returns 0. */
int attn_blockavg_tile(void *acc, int64_t b, int64_t h, int64_t q0,
                       int64_t nq, int64_t k0, int64_t nk, const float *w,
                       int64_t ldw);

/* Size of the averaged map: rows x cols blocks of block_rows x block_cols
 * positions (the last block of an axis may be shorter). */
attn_status attn_blockavg_size(const attn_blockavg *acc, int64_t *rows,
                               int64_t *cols, int64_t *block_rows,
                               int64_t *block_cols);

/* Writes the averages (rows x cols f32, row-major) and, if seen is not
 * NULL, seen[r * cols + c] = 1 when any weight of the block was delivered
 * (blocks whose tiles the kernel skipped as fully masked get 0 and
 * average 0). Use seen as a keep mask to draw them as masked. */
attn_status attn_blockavg_result(const attn_blockavg *acc, float *map,
                                 uint8_t *seen);

/* visible[r * cols + c] = 1 when the mask (checked against (B, H, Lq, Lk))
 * leaves any pair of block (r, c) of the accumulator's map visible, so that
 * blocks the mask removes entirely can be drawn as masked. Reads the mask
 * only (it stops at the first visible pair of a block). mask NULL: all 1. */
attn_status attn_blockavg_visible(const attn_blockavg *acc,
                                  const attn_mask *mask, int64_t B, int64_t H,
                                  uint8_t *visible);

/* --- Terminal view ---------------------------------------------------- */

typedef enum {
    ATTN_TERM_PLAIN = 0,    /* no colour: shades " .:-=+*#%@"           */
    ATTN_TERM_256 = 1,      /* xterm 256-colour escapes                 */
    ATTN_TERM_TRUECOLOR = 2 /* 24-bit colour escapes                    */
} attn_term_color;

typedef struct {
    attn_term_color color;       /* default TRUECOLOR                     */
    /* Layout: 0 one cell = two columns x one line, with a label per row
     * and the column labels written downwards; 1 Unicode half blocks, one
     * column x half a line per cell, position ticks only (dense maps);
     * -1 (default): half blocks when the map has more than 40 rows or
     * columns, or when half the terminal width cannot hold it. */
    int half_blocks;
    int width;                   /* terminal columns (default 80, >= 20)  */
    const char *title;           /* first line; NULL: none                */
    const char *const *x_labels; /* [Lk] or NULL                          */
    const char *const *y_labels; /* [Lq] or NULL                          */
    double vmin, vmax;           /* as attn_heatmap_opts                  */
    const attn_mask *mask;       /* masked cells shown as "x" / grey      */
} attn_term_opts;

void attn_term_opts_init(attn_term_opts *opts);

/* Renders the map w[b, h] as UTF-8 text with a colour scale line into buf
 * (NUL-terminated); *len receives the length without the NUL. Maps wider
 * than the terminal are block-averaged. buf NULL with cap 0 only measures
 * (ATTN_OK, *len = length). Errors: ATTN_E_INVALID (cap too small: *len
 * still receives the length needed; NULL len), ATTN_E_SHAPE, ATTN_E_DTYPE,
 * ATTN_E_NOMEM. */
attn_status attn_term_render(const attn_tensor *w, int64_t b, int64_t h,
                             const attn_term_opts *opts, char *buf,
                             size_t cap, size_t *len);

/* --- Interactive HTML viewer ----------------------------------------- */

typedef struct {
    const char *title;           /* NULL: "attention"                      */
    const char *const *q_tokens; /* [Lq] left column, or NULL: positions   */
    const char *const *k_tokens; /* [Lk] right column, or NULL: q_tokens if
                                    Lq == Lk, else positions              */
} attn_html_opts;

/* Writes one self-contained HTML file (inline CSS and JavaScript, no
 * network) showing w (layers, heads, Lq, Lk): query tokens left, key tokens
 * right, a line per pair whose opacity is the weight, hover a token to keep
 * only its lines, layer and head selectors, and the heatmap beside it.
 * Up to 1024 tokens per side. Errors: ATTN_E_INVALID, ATTN_E_SHAPE,
 * ATTN_E_DTYPE, ATTN_E_IO, ATTN_E_NOMEM. */
attn_status attn_html_write(const char *path, const attn_tensor *w,
                            const attn_html_opts *opts);

/* --- Diagnostics ------------------------------------------------------ */

/* Verdict flags (combined by OR; 0 = nothing wrong seen). */
#define ATTN_VERDICT_TOO_UNIFORM 1u      /* mean normalized entropy >= 0.95 */
#define ATTN_VERDICT_TOO_CONCENTRATED 2u /* mean normalized entropy <= 0.10 */
#define ATTN_VERDICT_MASK_LEAK 4u        /* weight on masked keys > 0       */
#define ATTN_VERDICT_NOT_NORMALIZED 8u   /* a row sum is off by > 1e-3      */
#define ATTN_VERDICT_NONFINITE 16u       /* NaN or Inf weights              */

typedef struct {
    int64_t rows;            /* query rows looked at                        */
    int64_t rows_empty;      /* rows with no visible key (expected sum 0)   */
    double row_sum_dev_max;  /* max |sum_j w[i,j] - expected| (1, or 0 for
                                an empty row)                               */
    double row_sum_dev_mean;
    /* Entropy of each row over its visible keys (renormalized to their
     * mass, so leaked weight does not push it past 1), divided by
     * log(visible keys): 0 = one-hot, 1 = uniform. Rows with fewer than
     * two visible keys or no visible mass have none; entropy_rows counts
     * the others. */
    int64_t entropy_rows;
    double entropy_min, entropy_mean, entropy_max;
    double max_weight;       /* largest finite weight                       */
    double leak_total;       /* sum of |w| on masked positions              */
    double leak_max;         /* largest |w| on a masked position            */
    int64_t leak_count;      /* masked positions with w != 0                */
    int64_t nan_count, inf_count;
    unsigned verdict;        /* ATTN_VERDICT_* flags                        */
} attn_stats;

/* Diagnostics of w (N, H, Lq, Lk) under mask (NULL: every key visible):
 * per_head[n * H + h] for each map (per_head may be NULL) and overall for
 * all of them. Errors: ATTN_E_INVALID, ATTN_E_SHAPE, ATTN_E_DTYPE. */
attn_status attn_stats_compute(const attn_tensor *w, const attn_mask *mask,
                               attn_stats *per_head, attn_stats *overall);

/* The verdict in plain words, one sentence per flag with the advice of the
 * tutorials, or "looks healthy: ..." when no flag is set. Truncates to cap
 * (always NUL-terminated); *len (if not NULL) gets the full length.
 * Errors: ATTN_E_INVALID (NULL s, NULL buf with cap > 0, flags that are
 * not ATTN_VERDICT_*). */
attn_status attn_stats_verdict(const attn_stats *s, char *buf, size_t cap,
                               size_t *len);

typedef struct {
    double max_abs;   /* max |a - b|                                       */
    double mean_abs;  /* mean |a - b| over the elements where both are
                         finite                                           */
    /* KL(a || b) of each row, sum_j a log(a / b) over a > 0 (natural log),
     * averaged over rows where a has mass: the distillation measure with a
     * as the teacher. A row with a > 0 where b = 0 is infinite. */
    double mean_kl;
    double max_kl;
    int64_t rows;     /* rows in the KL mean                               */
    int64_t nonfinite;/* elements where a or b is NaN or Inf (skipped)     */
} attn_compare_result;

/* Compares two weight tensors of the same shape. Errors: ATTN_E_INVALID,
 * ATTN_E_SHAPE, ATTN_E_DTYPE. */
attn_status attn_compare_weights(const attn_tensor *a, const attn_tensor *b,
                                 attn_compare_result *r);

/* ===================================================================== */
/* Training (issue 7)                                                    */
/* ===================================================================== */
/*
 * Small Transformer tasks trained end to end: a token embedding (times
 * sqrt(E)) plus sinusoidal positions, an encoder stack, and a linear head
 * that predicts one output token per position. Loss: softmax cross-entropy
 * with an ignore index. Optimizer: AdamW with linear warmup, cosine decay
 * and global-norm clipping. Everything is deterministic: the same seed
 * gives bitwise the same model on any thread count, and a run resumed from
 * a checkpoint is bitwise the uninterrupted one.
 *
 *     attn_train_config tc;
 *     attn_train_config_init(&tc, ATTN_TASK_REVERSE);   // tuned defaults
 *     attn_trainer *tr;
 *     if (attn_trainer_create(&tc, &tr)) ...;
 *     for (int64_t s = 0; s < tc.steps; s++) {
 *         attn_train_stats st;
 *         if (attn_trainer_step(tr, &st)) break;        // NaN stops here
 *     }
 *     attn_trainer_save(tr, "model.bin");               // atomic, CRC32
 *     attn_trainer_free(tr);
 */

/* --- Random numbers --------------------------------------------------- */

/* xoshiro256** state, seeded through splitmix64; part of a checkpoint. */
typedef struct {
    uint64_t s[4];
} attn_rng;

void attn_rng_seed(attn_rng *rng, uint64_t seed);
uint64_t attn_rng_next(attn_rng *rng);
/* Uniform integer in [0, n) (n >= 1), without modulo bias. */
uint64_t attn_rng_below(attn_rng *rng, uint64_t n);

/* --- Tasks ------------------------------------------------------------ */
/*
 * Token ids: 0 .. vocab-1 are symbols (digits for add), vocab is PAD,
 * vocab+1 is SEP ('+' of add). The head predicts symbols only
 * (vocab_out = vocab). A target of ATTN_IGNORE_INDEX marks a position
 * without an answer (padding, operands of add past the sum).
 *
 *   reverse  x_0 .. x_{n-1}        -> targets x_{n-1} .. x_0
 *   copy     x_0 .. x_{n-1}        -> targets x_0 .. x_{n-1}
 *   sort     x_0 .. x_{n-1}        -> targets the x sorted ascending
 *   add      a_0 .. a_{n-1} SEP b_0 .. b_{n-1}   (digits least significant
 *            first, n digits each, leading zeros kept) -> targets
 *            s_0 .. s_n at positions 0 .. n (s = a + b, least significant
 *            first; s_n is the carry, read at the SEP position); the other
 *            positions are ignored. Whole-sum accuracy = sequence accuracy.
 * n is drawn uniformly in [min_len, max_len] per sequence (digits per
 * operand for add); a batch is padded with PAD to attn_task_seq_len and
 * lengths[b] gives the valid tokens (keys past it are masked).
 */
typedef enum {
    ATTN_TASK_REVERSE = 0,
    ATTN_TASK_COPY = 1,
    ATTN_TASK_SORT = 2,
    ATTN_TASK_ADD = 3
} attn_task_kind;

#define ATTN_TASK_COUNT 4
#define ATTN_IGNORE_INDEX (-1)

typedef struct {
    attn_task_kind kind;
    int64_t vocab;   /* symbols, >= 2 (add: the base, 2 .. 36)           */
    int64_t min_len; /* shortest sequence (add: digits per operand), >= 1 */
    int64_t max_len; /* longest, >= min_len                              */
} attn_task;

/* Defaults: vocab 10, lengths 16..16 (add: 3..3 digits). */
void attn_task_init(attn_task *task, attn_task_kind kind);
/* "reverse", "copy", "sort", "add" ("?" if unknown). */
const char *attn_task_name(attn_task_kind kind);
/* Parses a task name; ATTN_E_INVALID listing the names if unknown. */
attn_status attn_task_parse(const char *name, attn_task_kind *kind);
attn_status attn_task_check(const attn_task *task);
/* Padded sequence length L: max_len, or 2 max_len + 1 for add. */
int64_t attn_task_seq_len(const attn_task *task);
/* Input ids vocab + 2 (PAD, SEP); output classes vocab. */
int64_t attn_task_vocab_in(const attn_task *task);
int64_t attn_task_vocab_out(const attn_task *task);

/* B fresh examples drawn from rng: tokens and targets (B, L) int32 with
 * L = attn_task_seq_len, lengths [B] (valid tokens), all overwritten. */
attn_status attn_task_batch(const attn_task *task, attn_rng *rng, int64_t B,
                            int32_t *tokens, int32_t *targets,
                            int64_t *lengths);

/* The answer for one given input: tokens[0 .. n) (n <= L, no PAD; add:
 * the full layout) -> targets[0 .. n) as attn_task_batch would give.
 * ATTN_E_INVALID if the input does not fit the task. */
attn_status attn_task_solve(const attn_task *task, const int32_t *tokens,
                            int64_t n, int32_t *targets);

/* --- Model ------------------------------------------------------------ */

typedef struct {
    attn_encoder_config enc; /* E = enc.d_model, layers, heads, ...       */
    int64_t vocab_in;        /* input ids 0 .. vocab_in-1                 */
    int64_t vocab_out;       /* classes of the head                      */
    int64_t max_len;         /* longest L the model is asked to run       */
} attn_model_config;

/* Block layout: embed (vocab_in, E), the encoder block (prefix "enc."),
 * head.w (vocab_out, E), head.b (vocab_out). */
attn_status attn_model_check(const attn_model_config *cfg);
int64_t attn_model_param_count(const attn_model_config *cfg);
attn_status attn_model_param_slices(const attn_model_config *cfg,
                                    attn_param_slice *slices, int64_t cap,
                                    int64_t *count);
/* Xavier (matrices and the embedding), zeros (biases, betas), ones
 * (gammas), from seed. */
attn_status attn_model_init(const attn_model_config *cfg, float *params,
                            uint64_t seed);
attn_status attn_model_workspace_size(const attn_model_config *cfg,
                                      int64_t B, int64_t L, size_t *floats);
/*
 *   tokens (B, L) int32 in [0, vocab_in); lengths [B] in [1, L] or NULL
 *   (all L): keys past lengths[b] are masked (opts->mask.key_lengths is
 *   set from it; the rest of opts is passed to the encoder).
 *   logits (B, L, vocab_out) overwritten; weights NULL or
 *   (N, B, Hw, L, L) as attn_encoder_forward; ws saved for backward.
 */
attn_status attn_model_forward(const attn_model_config *cfg,
                               const float *params, int64_t B, int64_t L,
                               const int32_t *tokens, const int64_t *lengths,
                               const attn_layer_opts *opts, float *logits,
                               float *weights, float *ws);
/* dlogits (B, L, vocab_out); grads ADDED INTO. Same arguments as the
 * forward that filled ws. */
attn_status attn_model_backward(const attn_model_config *cfg,
                                const float *params, int64_t B, int64_t L,
                                const int32_t *tokens, const int64_t *lengths,
                                const attn_layer_opts *opts,
                                const float *dlogits, float *ws, float *grads);

/* --- Loss and optimizer ----------------------------------------------- */

/* Mean softmax cross-entropy over the n rows whose target is not
 * ignore_index (targets in [0, classes) otherwise, else ATTN_E_INVALID).
 * loss: the mean (0 if no row counts); dlogits (n, classes) or NULL:
 * OVERWRITTEN with d loss / d logits (zero rows for ignored targets);
 * counted, correct (or NULL): rows counted, rows whose argmax (first
 * maximum) is the target. NaN/Inf in logits: ATTN_E_NONFINITE. */
attn_status attn_cross_entropy(int64_t n, int64_t classes, const float *logits,
                               const int32_t *targets, int32_t ignore_index,
                               double *loss, float *dlogits, int64_t *counted,
                               int64_t *correct);

typedef struct {
    double lr;           /* peak learning rate                            */
    double beta1, beta2; /* moment decays                                 */
    double eps;
    double weight_decay; /* decoupled, on Xavier-initialized slices only  */
    int64_t warmup;      /* steps of linear warmup from lr / warmup       */
    int64_t decay_steps; /* cosine decay to min_lr over steps warmup ..
                            decay_steps; <= warmup: constant after warmup */
    double min_lr;       /* floor of the decay                           */
    double clip_norm;    /* global gradient norm limit; <= 0: no clipping */
} attn_adamw_config;

/* lr 1e-3, betas 0.9 / 0.98, eps 1e-9, weight decay 0.01, warmup 100, no
 * decay, min_lr 0, clip_norm 1.0 (the tutorials' grad_clip). */
void attn_adamw_config_init(attn_adamw_config *cfg);
attn_status attn_adamw_check(const attn_adamw_config *cfg);
/* Learning rate of step (0-based). */
double attn_adamw_lr(const attn_adamw_config *cfg, int64_t step);
/* Global L2 norm of grads (summed in double, in order); if max_norm > 0 and
 * the norm exceeds it, grads are scaled by max_norm / norm. NaN/Inf in
 * grads: ATTN_E_NONFINITE (naming the first element), grads unchanged. */
attn_status attn_clip_grad_norm(float *grads, int64_t n, double max_norm,
                                double *norm);
/* One AdamW update of params with grads (not clipped here), moments m and
 * v (n each, zero at step 0) updated in place; step is 0-based. Weight
 * decay applies to the slices whose init is ATTN_INIT_XAVIER. */
attn_status attn_adamw_step(const attn_adamw_config *cfg, int64_t step,
                            const attn_param_slice *slices, int64_t nslices,
                            int64_t n, float *params, const float *grads,
                            float *m, float *v);

/* --- Trainer ---------------------------------------------------------- */

typedef struct {
    attn_task task;
    attn_model_config model; /* vocab_in/out, max_len follow the task    */
    attn_adamw_config optim;
    int64_t batch;           /* sequences per step                        */
    int64_t steps;           /* planned steps (the schedule's horizon)    */
    uint64_t seed;           /* init, data and dropout                    */
    double dropout;          /* encoder dropout in training               */
    int threads;             /* OpenMP threads of the kernels (0: default);
                                not stored in checkpoints                 */
} attn_train_config;

/* Task defaults and the model and optimizer settings chosen by experiment
 * for that task (see the README's "Training"). */
void attn_train_config_init(attn_train_config *cfg, attn_task_kind kind);
/* Validates; sets the model's vocabularies and max_len from the task. */
attn_status attn_train_config_check(attn_train_config *cfg);

typedef struct {
    int64_t step;      /* steps done after this one                      */
    double loss;       /* mean cross-entropy of the batch                */
    double token_acc;  /* of the batch's target tokens                   */
    double seq_acc;    /* sequences with every target right              */
    double grad_norm;  /* before clipping                                */
    double lr;
    int64_t tokens;    /* target tokens of the batch                     */
} attn_train_stats;

/* Opaque: model, gradients, optimizer moments, data RNG and step, with
 * every buffer of a step allocated once here. */
typedef struct attn_trainer attn_trainer;

attn_status attn_trainer_create(const attn_train_config *cfg,
                                attn_trainer **out);
/* One step: a fresh batch, forward, loss, backward, clipping, AdamW.
 * A NaN/Inf loss or gradient returns ATTN_E_NONFINITE with the step in the
 * message and leaves the model as it was before the step. */
attn_status attn_trainer_step(attn_trainer *tr, attn_train_stats *stats);
int64_t attn_trainer_steps_done(const attn_trainer *tr);
const attn_train_config *attn_trainer_config(const attn_trainer *tr);
/* The parameter block (attn_model_param_count floats); the pointer stays
 * valid until the trainer is freed. */
const float *attn_trainer_params(const attn_trainer *tr);
/* Kernel threads from now on (results do not depend on it). */
attn_status attn_trainer_set_threads(attn_trainer *tr, int threads);
/* Changes the planned steps (the schedule) of a resumed run. */
attn_status attn_trainer_set_steps(attn_trainer *tr, int64_t steps);

/*
 * Checkpoint: config, step, data RNG, parameters and both AdamW moments,
 * closed by a CRC32 (docs/checkpoint-format.md). Written to a temporary
 * file in the same folder, fsync'ed and renamed over path, so path holds
 * the old or the new checkpoint, never a mix. Loading a truncated,
 * corrupted or foreign file is ATTN_E_FORMAT (ATTN_E_IO if unreadable).
 * A loaded trainer continues bitwise as the one that was saved.
 */
attn_status attn_trainer_save(const attn_trainer *tr, const char *path);
attn_status attn_trainer_load(const char *path, attn_trainer **out);
void attn_trainer_free(attn_trainer *tr);

/* --- Evaluation -------------------------------------------------------- */

typedef struct {
    int64_t sequences, sequences_correct; /* all targets right           */
    int64_t tokens, tokens_correct;       /* target tokens               */
    double token_acc, seq_acc, loss;
} attn_eval_result;

/* Accuracy of a model on count fresh sequences of task drawn from seed
 * (a stream distinct from training's for any seed), no dropout. */
attn_status attn_model_evaluate(const attn_model_config *cfg,
                                const float *params, const attn_task *task,
                                int64_t count, uint64_t seed, int threads,
                                attn_eval_result *res);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_H */

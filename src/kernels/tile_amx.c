/* bf16 tile products on AMX (Intel's matrix units), behind the functions
 * of tile_bf16.h when the process's path is ATTN__ISA_AMX.
 *
 * The packed operand of tile_bf16.c is already AMX's B layout: in a panel
 * of 32 columns, the row of pair p holds (B[2p][c], B[2p+1][c]) for columns
 * 0..15, then for 16..31, 64 bytes each. So a B tile (16 pairs x 16
 * columns) is 16 rows of 64 bytes at a stride of 128, read in place. A
 * tile (16 rows x 32 bf16 of k) is 16 rows of the caller's A at its stride.
 *
 * Tiling: 32 rows x 32 columns of C in four accumulator tiles (tmm0-3),
 * two A tiles (tmm4-5) and two B tiles (tmm6-7) per chunk of 16 pairs:
 * four loads feed four TDPBF16PS. The chunks run in order from the
 * caller's first pair, and the tiles are the same whatever rows a caller
 * asks for, so an element's bits depend on the shapes and p0 only, never
 * on how rows are cut between threads.
 *
 * Edges: a chunk that is not 16 whole pairs, or a tile of fewer than 16
 * rows, is copied into a zeroed buffer on the stack, so nothing past the
 * caller's rows or pairs is read (0 x Inf would be NaN); accumulators go
 * through a buffer too, and only the columns and rows asked for are
 * written, as C = alpha acc or C += alpha acc (one FMA).
 *
 * The tile configuration is loaded at each call: a caller's thread may
 * have run other AMX code in between. */
#include "tile_bf16.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define TAMX                                                                   \
    __attribute__((                                                            \
        target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

#define NR 32 /* columns of a panel */
#define PK 16 /* pairs of a chunk */

/* the 64-byte operand of LDTILECFG (palette 1) */
typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

TAMX static void configure(void) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
}

/* One 16-row A tile of chunk ch: in place when whole, else copied. */
typedef struct {
    const uint16_t *A;
    int64_t lda, rows, npairs; /* rows of A from this tile's first */
} a_src;

static const uint16_t *a_chunk(const a_src *s, int64_t ch, uint16_t *buf,
                               int64_t *stride) {
    const int64_t pairs = s->npairs - ch * PK < PK ? s->npairs - ch * PK : PK;
    if (s->rows >= 16 && pairs == PK) {
        *stride = s->lda * 2;
        return s->A + ch * 2 * PK;
    }
    memset(buf, 0, 16 * 2 * PK * sizeof *buf);
    const int64_t nr = s->rows < 16 ? s->rows : 16;
    for (int64_t r = 0; r < nr; r++)
        memcpy(buf + r * 2 * PK, s->A + r * s->lda + ch * 2 * PK,
               (size_t)(2 * pairs) * sizeof *buf);
    *stride = 2 * PK * 2;
    return buf;
}

/* One chunk of a panel's B: pairs p .. p+15 in place when they exist and
 * any past the caller's last pair p1 are the pack's zero padding; else the
 * pairs below p1 copied and the rest zeroed. */
static const uint16_t *b_chunk(const uint16_t *panel, int64_t p, int64_t p1,
                               int64_t np_data, int64_t np_pad, uint16_t *buf) {
    if (p + PK <= p1 || (p1 >= np_data && p + PK <= np_pad))
        return panel + p * 2 * NR;
    memset(buf, 0, PK * 2 * NR * sizeof *buf);
    memcpy(buf, panel + p * 2 * NR, (size_t)((p1 - p) * 2 * NR) * sizeof *buf);
    return buf;
}

typedef struct {
    int64_t m, c0, n;        /* rows, first column, columns of C        */
    int64_t p0, p1;          /* the pairs summed                        */
    int64_t np_data, np_pad; /* pairs of the pack: real, allocated      */
    const uint16_t *A, *B;   /* A at pair p0; B the pack's panel 0      */
    int64_t lda;
    float *C;
    int64_t ldc;
    float alpha;
    int add;
} amx_call;

/* acc (rows x 32, ld 32) into C's rows i.., columns of panel q */
TAMX static void write_back(const amx_call *k, int64_t i, int64_t nrows,
                            int64_t q, const float *acc) {
    const int64_t j = q * NR - k->c0;
    __mmask32 keep = 0xffffffffu;
    if (j < 0) keep &= 0xffffffffu << (-j);
    if (j + NR > k->n) keep &= 0xffffffffu >> (j + NR - k->n);
    const __mmask16 m0 = (__mmask16)keep, m1 = (__mmask16)(keep >> 16);
    const __m512 al = _mm512_set1_ps(k->alpha);
    for (int64_t r = 0; r < nrows; r++) {
        float *c = k->C + (i + r) * k->ldc + j;
        const __m512 a0 = _mm512_loadu_ps(acc + r * NR);
        const __m512 a1 = _mm512_loadu_ps(acc + r * NR + 16);
        if (k->add) {
            _mm512_mask_storeu_ps(
                c, m0, _mm512_fmadd_ps(al, a0, _mm512_maskz_loadu_ps(m0, c)));
            _mm512_mask_storeu_ps(
                c + 16, m1,
                _mm512_fmadd_ps(al, a1, _mm512_maskz_loadu_ps(m1, c + 16)));
        } else {
            _mm512_mask_storeu_ps(c, m0, _mm512_mul_ps(al, a0));
            _mm512_mask_storeu_ps(c + 16, m1, _mm512_mul_ps(al, a1));
        }
    }
}

/* Rows i .. i+31 (fewer at the end) against panel q: 2 x 2 tiles, or
 * 1 x 2 when 16 rows or fewer are left; stored raw at S (ld lds) when S
 * is given, else through write_back. */
TAMX static void block(const amx_call *k, int64_t i, int64_t q, float *S,
                       int64_t lds) {
    _Alignas(64) uint16_t abuf[2][16 * 2 * PK], bbuf[PK * 2 * NR];
    _Alignas(64) float acc[32 * NR];
    const int two = k->m - i > 16;
    const int64_t np = k->p1 - k->p0, nch = (np + PK - 1) / PK;
    const uint16_t *panel = k->B + q * k->np_pad * 2 * NR;
    const a_src s0 = {k->A + i * k->lda, k->lda, k->m - i, np};
    const a_src s1 = {k->A + (i + 16) * k->lda, k->lda, k->m - i - 16, np};
    _tile_zero(0);
    _tile_zero(1);
    if (two) {
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int64_t ch = 0; ch < nch; ch++) {
        int64_t sa0, sa1;
        const uint16_t *a0 = a_chunk(&s0, ch, abuf[0], &sa0);
        const uint16_t *b =
            b_chunk(panel, k->p0 + ch * PK, k->p1, k->np_data, k->np_pad, bbuf);
        _tile_loadd(4, a0, sa0);
        _tile_loadd(6, b, 2 * NR * 2);
        _tile_loadd(7, b + 32, 2 * NR * 2);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (two) {
            const uint16_t *a1 = a_chunk(&s1, ch, abuf[1], &sa1);
            _tile_loadd(5, a1, sa1);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
    float *o = S ? S : acc;
    const int64_t ld = S ? lds : NR;
    _tile_stored(0, o, ld * 4);
    _tile_stored(1, o + 16, ld * 4);
    if (two) {
        _tile_stored(2, o + 16 * ld, ld * 4);
        _tile_stored(3, o + 16 * ld + 16, ld * 4);
    }
    if (!S) write_back(k, i, k->m - i < 32 ? k->m - i : 32, q, acc);
}

static void init_call(amx_call *k, int64_t m, int64_t c0, int64_t n, int64_t p0,
                      int64_t p1, int64_t k_elems, const uint16_t *A,
                      int64_t lda, const uint16_t *B) {
    memset(k, 0, sizeof *k);
    k->m = m;
    k->c0 = c0;
    k->n = n;
    k->p0 = p0;
    k->p1 = p1;
    k->np_data = (k_elems + 1) / 2;
    k->np_pad = attn__bf16_pack_pairs(k_elems);
    k->A = A;
    k->B = B;
    k->lda = lda;
}

TAMX void attn__amx_bf16_nt_raw(int64_t m, int64_t q0, int64_t q1, int64_t k,
                                const uint16_t *A, int64_t lda,
                                const uint16_t *B, float *S, int64_t lds) {
    amx_call c;
    init_call(&c, m, 0, 0, 0, (k + 1) / 2, k, A, lda, B);
    configure();
    for (int64_t i = 0; i < m; i += 32)
        for (int64_t q = q0; q < q1; q++) {
            block(&c, i, q, S + i * lds + q * NR, lds);
        }
}

TAMX void attn__amx_bf16_drive(int64_t m, int64_t c0, int64_t n, int64_t p0,
                               int64_t p1, int64_t k_elems, const uint16_t *A,
                               int64_t lda, const uint16_t *B, float *C,
                               int64_t ldc, float alpha, int add) {
    amx_call k;
    init_call(&k, m, c0, n, p0, p1, k_elems, A, lda, B);
    k.C = C;
    k.ldc = ldc;
    k.alpha = alpha;
    k.add = add;
    configure();
    const int64_t q0 = c0 / NR, q1 = (c0 + n + NR - 1) / NR;
    for (int64_t i = 0; i < m; i += 32)
        for (int64_t q = q0; q < q1; q++) {
            block(&k, i, q, NULL, 0);
        }
}
#else
void attn__amx_bf16_drive(int64_t m, int64_t c0, int64_t n, int64_t p0,
                          int64_t p1, int64_t k_elems, const uint16_t *A,
                          int64_t lda, const uint16_t *B, float *C, int64_t ldc,
                          float alpha, int add) {
    (void)m, (void)c0, (void)n, (void)p0, (void)p1, (void)k_elems, (void)A;
    (void)lda, (void)B, (void)C, (void)ldc, (void)alpha, (void)add;
}
void attn__amx_bf16_nt_raw(int64_t m, int64_t q0, int64_t q1, int64_t k,
                           const uint16_t *A, int64_t lda, const uint16_t *B,
                           float *S, int64_t lds) {
    (void)m, (void)q0, (void)q1, (void)k, (void)A, (void)lda, (void)B, (void)S;
    (void)lds;
}
#endif

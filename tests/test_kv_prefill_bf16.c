/* Chunked prefill into a bf16 KV cache on bf16 tiles (attn_sdpa_cached
 * with impl ATTN_IMPL_FLASH_BF16): a prompt appended chunk by chunk, each
 * chunk's queries attending over everything cached so far, against the
 * double reference over the stored values (impl REF), on odd sizes (D 3,
 * 17, 64, 129; chunks of 1, 3, 17, 129 queries; keys past the kernel's
 * 256-key chunks), Lq != Lk, grouped heads, ragged entries and masks
 * (causal, window, query lengths, none, ALiBi, softcap); 1, 2 and 3
 * threads give the same bits; and the bf16 tiles really ran (the result
 * differs from the f32 kernel's over the same cache) where a unit has the
 * 8 rows (G Lq) they need, and not below (decode steps of few heads). The error bound is
 * bf16's: q and the weights are rounded to bf16 for the tile products, as
 * the flash kernel's bf16 path does; the test prints the largest error.
 * Where the CPU lacks AVX512_BF16 the request runs the f32 kernel: checked
 * to give its bits, and the bf16 tiles are reported NOT run on stderr. */
#include "../src/kernels/cpu.h"
#include "attn_cache.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bf16_cpu;
static double worst;

static float urand(unsigned long long *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) * 0x1p-53 * 2.0 - 1.0);
}

enum { MK_CAUSAL, MK_WINDOW, MK_QLEN, MK_NONE, MK_ALIBI, MK_SOFTCAP };
static const char *const mk_name[] = {"causal", "window", "query-lengths",
                                      "none",   "alibi",  "softcap"};

/* One prompt of len positions per entry (entry b: len - 5 b), appended in
 * chunks of T and attended chunk by chunk. */
static void prefill_case(int64_t B, int64_t H, int64_t Hkv, int64_t D,
                         int64_t len, int64_t T, int mk) {
    attn_kv_cache_config cc;
    attn_kv_cache_config_init(&cc);
    cc.batch = B;
    cc.kv_heads = Hkv;
    cc.capacity = len;
    cc.head_dim = D;
    cc.dtype = ATTN_BF16;
    attn_kv_cache *cache = NULL;
    CHECK_STATUS(attn_kv_cache_create(&cc, &cache), ATTN_OK);
    if (!cache) return;
    unsigned long long rs = (unsigned long long)(D * 1000 + T * 7 + mk + 1);
    const size_t nkv = (size_t)(B * Hkv * T * D), nq = (size_t)(B * H * T * D);
    float *k = malloc(sizeof(float) * nkv), *v = malloc(sizeof(float) * nkv);
    float *q = malloc(sizeof(float) * nq), *out[5];
    for (int t = 0; t < 5; t++) out[t] = malloc(sizeof(float) * nq);
    int64_t counts[4], qlen[4];
    double err = 0, diff = 0;
    for (int64_t done = 0; done < len; done += T) {
        for (size_t i = 0; i < nkv; i++) k[i] = 1.5f * urand(&rs);
        for (size_t i = 0; i < nkv; i++) v[i] = urand(&rs);
        for (size_t i = 0; i < nq; i++) q[i] = 1.5f * urand(&rs);
        int64_t any = 0;
        for (int64_t b = 0; b < B; b++) { /* entry b holds len - 5 b */
            const int64_t want = len - 5 * b > 1 ? len - 5 * b : 1;
            const int64_t c = want - done < T ? want - done : T;
            counts[b] = c > 0 ? c : 0;
            qlen[b] = counts[b] > 0 ? counts[b] : T;
            any += counts[b];
        }
        if (!any) break;
        attn_tensor K = attn_tensor_4d(k, ATTN_F32, B, Hkv, T, D);
        attn_tensor V = attn_tensor_4d(v, ATTN_F32, B, Hkv, T, D);
        CHECK_STATUS(attn_kv_cache_append(cache, &K, &V, counts), ATTN_OK);
        attn_tensor Q = attn_tensor_4d(q, ATTN_F32, B, H, T, D);
        attn_sdpa_opts o;
        attn_sdpa_opts_init(&o);
        o.mask.causal = mk != MK_NONE;
        o.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
        o.mask.query_lengths = qlen; /* the chunk's rows of each entry */
        if (mk == MK_WINDOW) o.mask.window_left = 40;
        if (mk == MK_ALIBI) o.mask.alibi = ATTN_ALIBI_CAUSAL;
        if (mk == MK_SOFTCAP) o.mask.softcap = 5.0;
        /* 0..2: bf16 tiles on 1..3 threads, 3: the reference, 4: f32 */
        for (int t = 0; t < 5; t++) {
            o.impl = t < 3    ? ATTN_IMPL_FLASH_BF16
                     : t == 3 ? ATTN_IMPL_REF
                              : ATTN_IMPL_FLASH;
            o.threads = t < 3 ? t + 1 : 2;
            attn_tensor O = attn_tensor_4d(out[t], ATTN_F32, B, H, T, D);
            CHECK_STATUS(attn_sdpa_cached(&Q, cache, &o, &O, NULL), ATTN_OK);
        }
        for (int t = 1; t < 3; t++)
            CHECK_MSG(!memcmp(out[0], out[t], sizeof(float) * nq),
                      "D %lld chunk %lld: %d threads differ from 1",
                      (long long)D, (long long)T, t + 1);
        double e = 0, m = 1e-30, d = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < counts[b]; i++)
                    for (int64_t x = 0; x < D; x++) {
                        const size_t at =
                            (size_t)(((b * H + h) * T + i) * D + x);
                        e = fmax(e, fabs(out[0][at] - out[3][at]));
                        d = fmax(d, fabs(out[0][at] - out[4][at]));
                        m = fmax(m, fabs(out[3][at]));
                    }
        err = fmax(err, e / m);
        diff = fmax(diff, d);
    }
    printf("bf16 cache B %lld H %lld/%lld D %lld prompt %lld in chunks of "
           "%lld, %s: error %.2e of the largest output\n",
           (long long)B, (long long)H, (long long)Hkv, (long long)D,
           (long long)len, (long long)T, mk_name[mk], err);
    if (err > worst) worst = err;
    CHECK_MSG(err < 1e-2, "error %.2e", err);
    /* the tiles serve units of >= 8 rows (G Lq): decode steps of few
     * heads run the f32 kernel */
    const int tiles = bf16_cpu && (H / Hkv) * T >= 8;
    CHECK_MSG(tiles ? diff > 0 : diff == 0,
              tiles ? "the bf16 tiles gave the f32 kernel's bits"
                    : "the fallback is not the f32 kernel");
    for (int t = 0; t < 5; t++) free(out[t]);
    free(k), free(v), free(q);
    attn_kv_cache_free(cache);
}

int main(void) {
    bf16_cpu = attn__isa_get() >= ATTN__ISA_AVX512_BF16;
    printf("path %s: bf16 tiles over a bf16 cache %s\n",
           attn__isa_name(attn__isa_get()), bf16_cpu ? "run" : "NOT run");
    if (!bf16_cpu)
        fprintf(stderr, "NOTE: this CPU has no AVX512_BF16 (or ATTN_ISA caps "
                        "it): the bf16 prefill tiles are NOT tested here, "
                        "only the f32 kernel they fall back to\n");
    prefill_case(2, 4, 2, 64, 300, 129, MK_CAUSAL);
    prefill_case(3, 2, 2, 17, 40, 17, MK_CAUSAL);
    prefill_case(1, 3, 1, 3, 9, 3, MK_NONE);
    prefill_case(2, 2, 1, 129, 270, 64, MK_WINDOW);
    prefill_case(2, 4, 4, 64, 33, 1, MK_CAUSAL);  /* decode: f32 kernel */
    prefill_case(1, 16, 2, 64, 20, 1, MK_CAUSAL); /* decode, G = 8: tiles */
    prefill_case(2, 4, 2, 32, 70, 17, MK_QLEN);
    prefill_case(1, 4, 2, 64, 100, 33, MK_ALIBI);
    prefill_case(2, 2, 2, 17, 60, 20, MK_SOFTCAP);
    printf("largest error: %.2e\n", worst);
    return check_done("test_kv_prefill_bf16");
}

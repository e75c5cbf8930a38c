/* The decode benchmark: memory bandwidth first (bench_mem.c: the best of
 * several read methods over a buffer far larger than the last-level
 * cache, 1 and 2 threads), then for
 * each case one decode step (Lq new queries per entry, bottom-right
 * causal) over a full KV cache: ms per step, GB/s of K/V bytes read
 * (values and q8 scales of every cached position), the ratio to the
 * bandwidth at the run's thread count, and the flash forward's time on
 * the same call (q and the cache's K/V as tensors of the cache's dtype;
 * f32 for q8). Every case is first checked against the reference (max
 * |error| <= 1e-4 over outputs of magnitude <= 1) and not reported if
 * wrong. Before each timed step twice the last-level cache is read so that
 * the cache comes from memory, not from the last-level cache, as it does
 * when the layers of a model take turns. Times are the best of several
 * steps. */
#include "bench_decode.h"
#include "bench_mem.h"
#include "cpu.h"

#include "attn.h"
#include "attn_cache.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK_TOL 1e-4

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void fill_random(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) * 0x1p-23 - 1.0);
    }
}

/* ---- cases ------------------------------------------------------------- */

typedef struct {
    const bench_decode_opts *o;
    FILE *out;
    int threads;
    double bw[3];         /* GB/s at 1 and 2 threads                       */
    const bench_mem *mem; /* the probe; its flush runs before each step  */
    int failed;
} runner;

typedef struct {
    int64_t B, Hkv, Lk;
    attn_dtype dt;
    double ms;
} result;

static void flush_llc(const runner *r) { bench_mem_flush(r->mem, r->threads); }

/* Fills the cache with random K/V, 512 positions per append. */
static int fill_cache(attn_kv_cache *c, int64_t B, int64_t Hkv, int64_t Lk,
                      int64_t D, uint64_t seed) {
    const int64_t P = Lk < 512 ? Lk : 512;
    size_t n = (size_t)(B * Hkv * P * D);
    float *k = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
    int rc = 0;
    if (!k || !v) rc = -1;
    for (int64_t l = 0; !rc && l < Lk; l += P) {
        int64_t T = Lk - l < P ? Lk - l : P;
        fill_random(k, n, seed + 2 * (uint64_t)l);
        fill_random(v, n, seed + 2 * (uint64_t)l + 1);
        attn_tensor K = attn_tensor_4d(k, ATTN_F32, B, Hkv, T, D);
        attn_tensor V = attn_tensor_4d(v, ATTN_F32, B, Hkv, T, D);
        if (attn_kv_cache_append(c, &K, &V, NULL)) rc = -1;
    }
    free(k);
    free(v);
    return rc;
}

/* Best time in seconds of reps calls of the decode (or, flash = 1, of the
 * flash forward) after one warm-up; until 0.4 s or 20 reps. */
typedef struct {
    const attn_tensor *q, *k, *v;
    const attn_kv_cache *cache;
    const attn_sdpa_opts *opts;
    attn_tensor *out;
} call_t;

static attn_status call_once(const call_t *c) {
    if (c->cache)
        return attn_sdpa_cached(c->q, c->cache, c->opts, c->out, NULL);
    return attn_sdpa_forward(c->q, c->k, c->v, c->opts, c->out, NULL, NULL);
}

static double time_call(const runner *r, const call_t *c) {
    if (call_once(c)) return -1.0;
    double best = INFINITY, spent = 0.0;
    for (int rep = 0; rep < 20 && (rep < 3 || spent < 0.4); rep++) {
        flush_llc(r);
        double t0 = now_s();
        if (call_once(c)) return -1.0;
        double dt = now_s() - t0;
        spent += dt;
        if (dt < best) best = dt;
    }
    return best;
}

/* Flash forward on the cache's K/V as plain tensors: ms, or -1 if skipped. */
static double flash_ms(const runner *r, const attn_kv_cache *c,
                       const attn_tensor *q32, int64_t B, int64_t H,
                       int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D,
                       attn_dtype dt, const attn_sdpa_opts *opts) {
    attn_dtype td = dt == ATTN_Q8 ? ATTN_F32 : dt;
    size_t es = attn_dtype_size(td), nkv = (size_t)(B * Hkv * Lk * D);
    size_t nq = (size_t)(B * H * Lq * D);
    if (2.0 * (double)(nkv * es) * 1e-9 > r->o->max_gb) return -1.0;
    void *k = malloc(nkv * es), *v = malloc(nkv * es), *q = malloc(nq * es);
    float *o = malloc(nq * sizeof(float));
    double ms = -1.0;
    if (k && v && q && o) {
        int ok = attn_convert(q32->data, ATTN_F32, q, td, nq) == ATTN_OK;
        for (int64_t b = 0; ok && b < B; b++) {
            attn_tensor K = attn_tensor_4d(
                (char *)k + (size_t)(b * Hkv * Lk * D) * es, td, 1, Hkv, Lk, D);
            attn_tensor V = attn_tensor_4d(
                (char *)v + (size_t)(b * Hkv * Lk * D) * es, td, 1, Hkv, Lk, D);
            ok = attn_kv_cache_read(c, b, 0, &K, &V) == ATTN_OK;
        }
        attn_tensor Q = attn_tensor_4d(q, td, B, H, Lq, D);
        attn_tensor K = attn_tensor_4d(k, td, B, Hkv, Lk, D);
        attn_tensor V = attn_tensor_4d(v, td, B, Hkv, Lk, D);
        attn_tensor O = attn_tensor_4d(o, ATTN_F32, B, H, Lq, D);
        attn_sdpa_opts fo = *opts;
        fo.impl = ATTN_IMPL_FLASH;
        call_t call = {&Q, &K, &V, NULL, &fo, &O};
        double s = ok ? time_call(r, &call) : -1.0;
        ms = s >= 0 ? 1e3 * s : -1.0;
    }
    free(k);
    free(v);
    free(q);
    free(o);
    return ms;
}

static void print_header(const runner *r) {
    if (r->o->json) return;
    fprintf(r->out, "\nkernels %s\n", attn__isa_describe());
    fprintf(
        r->out,
        "\n| B | H | Hkv | Lq | Lk | D | kv | ms/step | GB/s | of bandwidth "
        "| flash ms | flash/decode | max err |\n"
        "| ---: | ---: | ---: | ---: | ---: | ---: | :--- | ---: | ---: | ---: "
        "| ---: | ---: | ---: |\n");
}

/* One case; returns its step time in ms (-1: skipped or failed). */
static double run_case(runner *r, int64_t B, int64_t Hkv, int64_t Lk,
                       attn_dtype dt) {
    const int64_t H = 32, D = 128, Lq = r->o->lq > 0 ? r->o->lq : 1;
    attn_kv_cache_config cc;
    attn_kv_cache_config_init(&cc);
    cc.batch = B;
    cc.kv_heads = Hkv;
    cc.capacity = Lk;
    cc.head_dim = D;
    cc.dtype = dt;
    size_t bytes;
    if (attn_kv_cache_bytes(&cc, &bytes)) return -1.0;
    if ((double)bytes * 1e-9 > r->o->max_gb) {
        if (!r->o->json)
            fprintf(
                r->out,
                "| %lld | %lld | %lld | %lld | %lld | %lld | %s | "
                "skipped: the cache needs %.1f GB (> --max-gb %.1f) |||||| \n",
                (long long)B, (long long)H, (long long)Hkv, (long long)Lq,
                (long long)Lk, (long long)D, attn_dtype_name(dt),
                (double)bytes * 1e-9, r->o->max_gb);
        return -1.0;
    }
    attn_kv_cache *c = NULL;
    size_t nq = (size_t)(B * H * Lq * D);
    float *q = malloc(nq * sizeof(float)), *o = malloc(nq * sizeof(float)),
          *oref = malloc(nq * sizeof(float));
    double ms = -1.0;
    if (!q || !o || !oref || attn_kv_cache_create(&cc, &c) ||
        fill_cache(c, B, Hkv, Lk, D, 7 + (uint64_t)Lk)) {
        fprintf(stderr, "attn bench --decode: %s\n", attn_last_error());
        r->failed = r->failed ? r->failed : 2;
        goto done;
    }
    fill_random(q, nq, 99);
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, B, H, Lq, D);
    attn_tensor O = attn_tensor_4d(o, ATTN_F32, B, H, Lq, D);
    attn_tensor Oref = attn_tensor_4d(oref, ATTN_F32, B, H, Lq, D);
    attn_sdpa_opts opts;
    attn_sdpa_opts_init(&opts);
    opts.mask.causal = 1;
    opts.mask.align = ATTN_ALIGN_BOTTOM_RIGHT;
    opts.threads = r->threads;
    opts.impl = ATTN_IMPL_REF;
    if (attn_sdpa_cached(&Q, c, &opts, &Oref, NULL)) {
        fprintf(stderr, "attn bench --decode: %s\n", attn_last_error());
        r->failed = r->failed ? r->failed : 2;
        goto done;
    }
    opts.impl = ATTN_IMPL_AUTO;
    call_t call = {&Q, NULL, NULL, c, &opts, &O};
    double s = time_call(r, &call);
    double err = 0.0;
    for (size_t i = 0; i < nq; i++) {
        double e = fabs((double)o[i] - oref[i]);
        if (!(e <= err)) err = isnan(e) ? INFINITY : e;
    }
    if (s < 0 || err > CHECK_TOL) {
        fprintf(stderr,
                "attn bench --decode: B=%lld Hkv=%lld Lk=%lld %s %s "
                "(max error %.3g against the reference, tolerance %g): not "
                "reported\n",
                (long long)B, (long long)Hkv, (long long)Lk,
                attn_dtype_name(dt), s < 0 ? attn_last_error() : "is wrong",
                err, CHECK_TOL);
        r->failed = 1;
        goto done;
    }
    ms = 1e3 * s;
    double fms = Lk <= r->o->flash_max_lk
                     ? flash_ms(r, c, &Q, B, H, Hkv, Lq, Lk, D, dt, &opts)
                     : -1.0;
    double gbps = (double)bytes / s * 1e-9;
    double bw = r->bw[r->threads >= 2 ? 2 : 1];
    char fjson[32] = "null";
    if (fms >= 0) snprintf(fjson, sizeof fjson, "%.4f", fms);
    if (r->o->json) {
        fprintf(r->out,
                "{\"impl\": \"decode\", \"B\": %lld, \"H\": %lld, "
                "\"Hkv\": %lld, \"Lq\": %lld, \"Lk\": %lld, \"D\": %lld, "
                "\"kv_dtype\": \"%s\", \"threads\": %d, \"ms\": %.4f, "
                "\"gbps\": %.3f, \"bandwidth_gbps\": %.3f, \"ratio\": %.4f, "
                "\"above_ceiling\": %s, \"kv_bytes\": %zu, \"flash_ms\": %s, "
                "\"max_err\": %.3g}\n",
                (long long)B, (long long)H, (long long)Hkv, (long long)Lq,
                (long long)Lk, (long long)D, attn_dtype_name(dt), r->threads,
                ms, gbps, bw, gbps / bw, gbps > bw ? "true" : "false", bytes,
                fjson, err);
    } else {
        char fbuf[32] = "-", sbuf[32] = "-", share[96];
        bench_mem_share(gbps, bw, share, sizeof share);
        if (fms >= 0) {
            snprintf(fbuf, sizeof fbuf, "%.3f", fms);
            snprintf(sbuf, sizeof sbuf, "%.2fx", fms / ms);
        }
        fprintf(r->out,
                "| %lld | %lld | %lld | %lld | %lld | %lld | %s | %.3f "
                "| %.1f | %s | %s | %s | %.1e |\n",
                (long long)B, (long long)H, (long long)Hkv, (long long)Lq,
                (long long)Lk, (long long)D, attn_dtype_name(dt), ms, gbps,
                share, fbuf, sbuf, err);
    }
    fflush(r->out);
done:
    attn_kv_cache_free(c);
    free(q);
    free(o);
    free(oref);
    return ms;
}

/* Parses a comma list of positive integers into v (at most 8). */
static int parse_list(const char *s, int64_t *v, int max) {
    int n = 0;
    while (s && *s && n < max) {
        char *end;
        long long x = strtoll(s, &end, 10);
        if (end == s || x < 1 || (*end && *end != ',')) return -1;
        v[n++] = x;
        s = *end ? end + 1 : end;
    }
    return n;
}

static int parse_dtypes(const char *s, attn_dtype *v) {
    int n = 0;
    char buf[64];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t && n < 4;
         t = strtok_r(NULL, ",", &save)) {
        if (strcmp(t, "f32") == 0)
            v[n++] = ATTN_F32;
        else if (strcmp(t, "f16") == 0)
            v[n++] = ATTN_F16;
        else if (strcmp(t, "bf16") == 0)
            v[n++] = ATTN_BF16;
        else if (strcmp(t, "q8") == 0)
            v[n++] = ATTN_Q8;
        else
            return -1;
    }
    return n;
}

int bench_decode_run(const bench_decode_opts *o, FILE *out) {
    runner r;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.out = out;
    r.threads = o->threads > 0 ? o->threads : omp_get_max_threads();
    int64_t Bs[8] = {1, 4}, Hs[8] = {32, 8},
            Ls[8] = {1024, 8192, 32768, 131072};
    int nB = 2, nH = 2, nL = 4, nD = 4;
    attn_dtype dts[4] = {ATTN_F32, ATTN_F16, ATTN_BF16, ATTN_Q8};
    if (o->quick) {
        nB = 1;
        nL = 2;
    }
    if (o->batches && (nB = parse_list(o->batches, Bs, 8)) < 1) {
        fprintf(stderr, "attn bench --decode: bad --batch list '%s'\n",
                o->batches);
        return 2;
    }
    if (o->kv_heads && (nH = parse_list(o->kv_heads, Hs, 8)) < 1) {
        fprintf(stderr, "attn bench --decode: bad --kv-heads list '%s'\n",
                o->kv_heads);
        return 2;
    }
    for (int i = 0; i < nH; i++)
        if (32 % Hs[i] != 0) {
            fprintf(stderr,
                    "attn bench --decode: --kv-heads %lld does not divide "
                    "H = 32\n",
                    (long long)Hs[i]);
            return 2;
        }
    if (o->dtypes && (nD = parse_dtypes(o->dtypes, dts)) < 1) {
        fprintf(stderr,
                "attn bench --decode: bad --kv-dtypes '%s' (f32, f16, "
                "bf16, q8)\n",
                o->dtypes);
        return 2;
    }
    /* the ceiling: far beyond any last-level cache, the best of several
     * methods */
    bench_mem mem;
    if (bench_mem_measure(&mem, o->bandwidth_mb)) {
        fprintf(stderr, "attn bench --decode: cannot allocate the bandwidth "
                        "probe's buffer\n");
        return 2;
    }
    r.mem = &mem;
    r.bw[1] = mem.gbps[1];
    r.bw[2] = mem.gbps[2];
    if (o->json) {
        for (int t = 1; t <= 2; t++)
            fprintf(out,
                    "{\"impl\": \"stream\", \"threads\": %d, \"gbps\": "
                    "%.3f, \"method\": \"%s\", \"bytes\": %zu, "
                    "\"llc_bytes\": %zu}\n",
                    t, r.bw[t], mem.method[t], mem.bytes, mem.llc_bytes);
    } else {
        fprintf(out,
                "memory bandwidth (read of %zu MB, best of 3 methods x 3 "
                "reads): %.1f GB/s on 1 thread (%s), %.1f GB/s on 2 (%s); "
                "last-level cache %zu MB, flushed before each step; decode "
                "runs on %d thread%s\n",
                mem.bytes >> 20, r.bw[1], mem.method[1], r.bw[2], mem.method[2],
                mem.llc_bytes >> 20, r.threads, r.threads == 1 ? "" : "s");
    }
    print_header(&r);
    result res[256];
    int nres = 0;
    for (int bi = 0; bi < nB; bi++)
        for (int hi = 0; hi < nH; hi++)
            for (int li = 0; li < nL; li++) {
                if (o->max_lk > 0 && Ls[li] > o->max_lk) continue;
                for (int di = 0; di < nD; di++) {
                    double ms = run_case(&r, Bs[bi], Hs[hi], Ls[li], dts[di]);
                    if (nres < 256)
                        res[nres++] =
                            (result){Bs[bi], Hs[hi], Ls[li], dts[di], ms};
                }
            }
    /* the targets' ratios, from this run */
    if (!o->json) {
        fprintf(out, "\n");
        for (int i = 0; i < nres; i++)
            for (int j = 0; j < nres; j++) {
                const result *a = &res[i], *b = &res[j];
                if (a->ms <= 0 || b->ms <= 0 || a->B != b->B || a->Lk != b->Lk)
                    continue;
                if (a->Hkv == b->Hkv && a->dt == ATTN_Q8 && b->dt == ATTN_F16)
                    fprintf(out,
                            "q8 / f16 step time, B=%lld Hkv=%lld Lk=%lld: "
                            "%.2f\n",
                            (long long)a->B, (long long)a->Hkv,
                            (long long)a->Lk, a->ms / b->ms);
                if (a->dt == b->dt && a->Hkv == 8 && b->Hkv == 32)
                    fprintf(out,
                            "Hkv 8 / Hkv 32 step time, B=%lld Lk=%lld %s: "
                            "%.2f\n",
                            (long long)a->B, (long long)a->Lk,
                            attn_dtype_name(a->dt), a->ms / b->ms);
            }
    }
    bench_mem_free(&mem);
    return r.failed;
}

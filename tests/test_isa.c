/* The instruction-set dispatch (src/kernels/cpu.c): the path detected
 * agrees with the CPU flags Linux reports, ATTN_ISA caps it, and every
 * path this CPU has runs the flash forward (bitwise the same on 1, 2 and 3
 * threads, within f32 rounding of the reference) and the row helpers.
 * Prints which paths ran; a path the CPU lacks is named on
 * stderr, and when ATTN_ISA asks for one the test exits 77 (CTest's
 * "skipped", listed in its summary) instead of passing. */
#include "check.h"
#include "../src/kernels/cpu.h"
#include "sdpa_test_util.h"
#include "../src/kernels/vec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 when the "flags" line of /proc/cpuinfo lists word; -1 without it. */
static int cpuinfo_has(const char *flags, const char *word) {
    if (!flags) return -1;
    size_t n = strlen(word);
    for (const char *p = flags; (p = strstr(p, word)) != NULL; p += n)
        if ((p == flags || p[-1] == ' ' || p[-1] == '\t') &&
            (p[n] == ' ' || p[n] == '\n' || p[n] == '\0'))
            return 1;
    return 0;
}

/* The path /proc/cpuinfo implies (without AMX's permission), -1 when the
 * file cannot be read (not Linux). */
static int path_of_cpuinfo(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return -1;
    static char flags[8192];
    int found = 0;
    while (fgets(flags, sizeof flags, f))
        if (!strncmp(flags, "flags", 5)) {
            found = 1;
            break;
        }
    fclose(f);
    if (!found) return -1;
    int p = ATTN__ISA_SCALAR;
    if (cpuinfo_has(flags, "avx2") == 1 && cpuinfo_has(flags, "fma") == 1 &&
        cpuinfo_has(flags, "f16c") == 1) {
        p = ATTN__ISA_AVX2;
        if (cpuinfo_has(flags, "avx512f") == 1 &&
            cpuinfo_has(flags, "avx512bw") == 1 &&
            cpuinfo_has(flags, "avx512vl") == 1) {
            p = ATTN__ISA_AVX512;
            if (cpuinfo_has(flags, "avx512_bf16") == 1) {
                p = ATTN__ISA_AVX512_BF16;
                if (cpuinfo_has(flags, "amx_bf16") == 1 &&
                    cpuinfo_has(flags, "amx_tile") == 1)
                    p = ATTN__ISA_AMX;
            }
        }
    }
    return p;
}

/* The flash forward at the current path against the reference, and
 * bitwise across thread counts. */
static void flash_at_path(const char *name) {
    static const int64_t shapes[][6] = {/* B, H, Hkv, Lq, Lk, D */
                                        {1, 2, 2, 1, 1, 1},
                                        {1, 2, 1, 17, 33, 64},
                                        {2, 3, 3, 129, 65, 17},
                                        {1, 4, 2, 300, 257, 128},
                                        {1, 1, 1, 3, 700, 32}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t *x = shapes[s];
        for (int causal = 0; causal < 2; causal++) {
            test_qkv t;
            test_qkv_make(&t, x[0], x[1], x[2], x[3], x[4], x[5], x[5],
                          1000 + (unsigned long long)s);
            attn_sdpa_opts o;
            attn_sdpa_opts_init(&o);
            o.mask.causal = causal;
            o.impl = ATTN_IMPL_REF;
            test_run ref, r[3];
            test_run_sdpa(&ref, &t, &o);
            o.impl = ATTN_IMPL_FLASH;
            const size_t n = (size_t)(t.B * t.H * t.Lq * t.Dv);
            for (int th = 0; th < 3; th++) {
                o.threads = th + 1;
                test_run_sdpa(&r[th], &t, &o);
                CHECK(r[th].st == ATTN_OK);
            }
            double e = 0;
            for (size_t i = 0; i < n; i++) {
                double d = fabs((double)r[0].o[i] - ref.o[i]);
                if (!(d <= e)) e = d;
            }
            CHECK_MSG(e < 2e-5, "%s: shape %zu causal %d: max err %g", name, s,
                      causal, e);
            CHECK_MSG(!memcmp(r[0].o, r[1].o, n * sizeof(float)) &&
                          !memcmp(r[0].o, r[2].o, n * sizeof(float)),
                      "%s: shape %zu causal %d: threads differ", name, s,
                      causal);
            test_run_free(&ref);
            for (int th = 0; th < 3; th++) test_run_free(&r[th]);
            test_qkv_free(&t);
        }
    }
}

static void run_path(attn__isa p) {
    attn__isa_set_max(p);
    CHECK_MSG(attn__isa_get() == p, "path %s asked, %s taken",
              attn__isa_name(p), attn__isa_name(attn__isa_get()));
    /* the row helpers follow the path */
    attn__vec_level want = p >= ATTN__ISA_AVX512 ? ATTN__VEC_AVX512
                           : p == ATTN__ISA_AVX2 ? ATTN__VEC_AVX2
                                                 : ATTN__VEC_SCALAR;
    CHECK(attn__vec_best() == want);
    CHECK(attn__vec_get()->level == want);
    flash_at_path(attn__isa_name(p));
    attn__isa_set_max(ATTN__ISA_AMX);
}

int main(void) {
    const attn__isa cpu = attn__isa_cpu();
    const char *env = getenv("ATTN_ISA");
    printf("dispatch: %s\n", attn__isa_describe());

    /* detection agrees with Linux's flags (AMX may be refused) */
    int want = path_of_cpuinfo();
#if defined(__linux__) && defined(__x86_64__)
    CHECK_MSG(want >= 0, "no flags line in /proc/cpuinfo");
#endif
    if (want >= 0) {
        int ok = (int)cpu == want ||
                 (want == ATTN__ISA_AMX && cpu == ATTN__ISA_AVX512_BF16 &&
                  strstr(attn__isa_describe(), "refused"));
        CHECK_MSG(ok, "detected %s, /proc/cpuinfo says %s", attn__isa_name(cpu),
                  attn__isa_name((attn__isa)want));
    }
    CHECK(strcmp(attn__isa_name(ATTN__ISA_AVX512_BF16), "avx512_bf16") == 0);

    if (env && *env) {
        /* one path, forced from outside */
        int asked = -1;
        for (int i = 0; i < ATTN__ISA_COUNT; i++)
            if (!strcmp(env, attn__isa_name((attn__isa)i))) asked = i;
        CHECK_MSG(asked >= 0, "ATTN_ISA='%s' is not a path name", env);
        if (asked > (int)cpu) {
            fprintf(stderr,
                    "\n*** ATTN_ISA=%s NOT RUN: this CPU's path is %s ***\n\n",
                    env, attn__isa_name(cpu));
            CHECK(attn__isa_get() == cpu);
            return check_done("test_isa") ? 1 : 77;
        }
        if (asked >= 0) {
            CHECK(attn__isa_get() == (attn__isa)asked);
            run_path((attn__isa)asked);
            attn__isa_set_max((attn__isa)asked);
            CHECK(attn__isa_get() == (attn__isa)asked);
            attn__isa_set_max(ATTN__ISA_AMX);
            printf("paths run: %s (ATTN_ISA)\n", env);
        }
        return check_done("test_isa");
    }

    /* every path this CPU has; the others named */
    printf("paths run:");
    for (int p = ATTN__ISA_SCALAR; p <= (int)cpu; p++) {
        run_path((attn__isa)p);
        printf(" %s", attn__isa_name((attn__isa)p));
    }
    printf("\n");
    if (cpu < ATTN__ISA_AMX) {
        fprintf(stderr, "*** paths NOT run (this CPU lacks them):");
        for (int p = (int)cpu + 1; p < ATTN__ISA_COUNT; p++)
            fprintf(stderr, " %s", attn__isa_name((attn__isa)p));
        fprintf(stderr, " ***\n");
    }
    return check_done("test_isa");
}

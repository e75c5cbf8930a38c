/* The kernels' instruction-set path, chosen once per process (cpu.h).
 *
 * Detection reads CPUID and XCR0 directly (the OS must save the wide
 * registers, not just the CPU have them) rather than
 * __builtin_cpu_supports, which clang 14 and gcc 12 do not agree on for
 * the bf16 and AMX bits. AMX also needs Linux's permission for the tile
 * data state (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); it is
 * asked once, and a refusal falls back to the next path. */
/* syscall (for arch_prctl), which glibc declares under _DEFAULT_SOURCE */
#define _DEFAULT_SOURCE 1

#include "cpu.h"

#include "internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define ATTN_X86 1
#else
#define ATTN_X86 0
#endif

#if ATTN_X86 && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define ATTN_ARCH_GET_XCOMP_PERM 0x1022
#define ATTN_ARCH_REQ_XCOMP_PERM 0x1023
#define ATTN_XFEATURE_XTILEDATA 18
#endif

static const char *const isa_names[ATTN__ISA_COUNT] = {
    "scalar", "avx2", "avx512", "avx512_bf16", "amx"};

const char *attn__isa_name(attn__isa isa) {
    return (unsigned)isa < ATTN__ISA_COUNT ? isa_names[isa] : "?";
}

/* ---- detection --------------------------------------------------------- */

typedef struct {
    attn__isa cpu;   /* the CPU + OS's path                              */
    attn__isa env;   /* ATTN_ISA's cap (ATTN__ISA_AMX when unset)         */
    int amx_refused; /* the CPU has AMX but the kernel refused its state */
    int vnni;        /* AVX512_VNNI beside an AVX-512 path               */
    char line[192];  /* attn__isa_describe                               */
} isa_state;

#if ATTN_X86
static unsigned long long xgetbv0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (unsigned long long)hi << 32 | lo;
}

/* 1 when Linux lets this process use the AMX tile data (asking for it if
 * it was not granted yet); 0 when refused or not Linux. */
static int amx_permitted(void) {
#if defined(__linux__)
    unsigned long long bits = 0;
    if (syscall(SYS_arch_prctl, ATTN_ARCH_GET_XCOMP_PERM, &bits) == 0 &&
        (bits >> ATTN_XFEATURE_XTILEDATA & 1))
        return 1;
    if (syscall(SYS_arch_prctl, ATTN_ARCH_REQ_XCOMP_PERM,
                ATTN_XFEATURE_XTILEDATA) != 0)
        return 0;
    bits = 0;
    return syscall(SYS_arch_prctl, ATTN_ARCH_GET_XCOMP_PERM, &bits) == 0 &&
           (bits >> ATTN_XFEATURE_XTILEDATA & 1);
#else
    return 0;
#endif
}
#endif

static attn__isa detect(int *amx_refused, int *vnni) {
    *amx_refused = 0;
    *vnni = 0;
#if ATTN_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return ATTN__ISA_SCALAR;
    const int fma = c >> 12 & 1, osxsave = c >> 27 & 1, avx = c >> 28 & 1,
              f16c = c >> 29 & 1;
    if (!osxsave || !avx || !fma || !f16c) return ATTN__ISA_SCALAR;
    const unsigned long long xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return ATTN__ISA_SCALAR; /* XMM + YMM saved */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return ATTN__ISA_SCALAR;
    const int avx2 = b >> 5 & 1, avx512f = b >> 16 & 1, avx512bw = b >> 30 & 1,
              avx512vl = b >> 31 & 1;
    const int amx_bf16 = d >> 22 & 1, amx_tile = d >> 24 & 1;
    if (!avx2) return ATTN__ISA_SCALAR;
    /* opmask, upper ZMM halves and ZMM16-31 saved */
    if (!avx512f || !avx512bw || !avx512vl || (xcr0 & 0xe0) != 0xe0)
        return ATTN__ISA_AVX2;
    *vnni = c >> 11 & 1;
    unsigned a1 = 0, b1, c1, d1;
    if (!__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) || !(a1 >> 5 & 1))
        return ATTN__ISA_AVX512;
    /* tile config + tile data saved by the OS, then the kernel's consent */
    if (!amx_bf16 || !amx_tile || (xcr0 & 0x60000) != 0x60000)
        return ATTN__ISA_AVX512_BF16;
    if (!amx_permitted()) {
        *amx_refused = 1;
        return ATTN__ISA_AVX512_BF16;
    }
    return ATTN__ISA_AMX;
#else
    return ATTN__ISA_SCALAR;
#endif
}

static isa_state state;
static atomic_int state_ready; /* 0: not yet, 1: being made, 2: ready */
static atomic_int isa_cap = ATTN__ISA_AMX;

static void make_state(void) {
    isa_state *s = &state;
    s->cpu = detect(&s->amx_refused, &s->vnni);
    s->env = ATTN__ISA_AMX;
    const char *e = getenv("ATTN_ISA");
    char esc[64];
    int understood = 1;
    if (e && *e) {
        understood = 0;
        for (int i = 0; i < ATTN__ISA_COUNT; i++)
            if (strcmp(e, isa_names[i]) == 0) {
                s->env = (attn__isa)i;
                understood = 1;
            }
        attn__escape(e, esc, sizeof esc);
    }
    attn__isa eff = s->cpu < s->env ? s->cpu : s->env;
    int n = snprintf(s->line, sizeof s->line, "%s (the CPU's: %s",
                     attn__isa_name(eff), attn__isa_name(s->cpu));
    if (e && *e && n > 0 && (size_t)n < sizeof s->line)
        n += snprintf(s->line + n, sizeof s->line - (size_t)n,
                      understood ? "; ATTN_ISA=%s"
                                 : "; ATTN_ISA='%s' ignored:"
                                   " not one of scalar, "
                                   "avx2, avx512, "
                                   "avx512_bf16, amx",
                      esc);
    if (s->amx_refused && n > 0 && (size_t)n < sizeof s->line)
        n += snprintf(s->line + n, sizeof s->line - (size_t)n,
                      "; AMX present but the kernel refused its state");
    if (n > 0 && (size_t)n < sizeof s->line)
        snprintf(s->line + n, sizeof s->line - (size_t)n, ")");
}

static const isa_state *get_state(void) {
    if (atomic_load_explicit(&state_ready, memory_order_acquire) == 2)
        return &state;
    int expect = 0;
    if (atomic_compare_exchange_strong(&state_ready, &expect, 1)) {
        make_state();
        atomic_store_explicit(&state_ready, 2, memory_order_release);
    } else {
        /* another thread is detecting: it takes microseconds */
        while (atomic_load_explicit(&state_ready, memory_order_acquire) != 2) {
        }
    }
    return &state;
}

attn__isa attn__isa_cpu(void) { return get_state()->cpu; }

attn__isa attn__isa_get(void) {
    const isa_state *s = get_state();
    attn__isa l = s->cpu < s->env ? s->cpu : s->env;
    attn__isa cap =
        (attn__isa)atomic_load_explicit(&isa_cap, memory_order_relaxed);
    return l < cap ? l : cap;
}

int attn__isa_vnni(void) {
    return attn__isa_get() >= ATTN__ISA_AVX512 && get_state()->vnni;
}

void attn__isa_set_max(attn__isa isa) {
    atomic_store_explicit(&isa_cap, (int)isa, memory_order_relaxed);
}

const char *attn__isa_describe(void) { return get_state()->line; }

/* The instruction-set path of the kernels, chosen once per process
 * (cpu.c): what the CPU and the operating system allow, capped by the
 * environment variable ATTN_ISA (to compare the lower paths on one machine)
 * and by attn__isa_set_max (tests). Every SIMD chooser in the library
 * (vec.c's row helpers, the f16 row conversion, the decode kernels, the
 * tile products) asks here. Internal: not installed. */
#ifndef ATTN_CPU_H
#define ATTN_CPU_H

/* Ordered: each path includes the ones below it. */
typedef enum {
    ATTN__ISA_SCALAR = 0,      /* portable C                               */
    ATTN__ISA_AVX2 = 1,        /* AVX2 + FMA + F16C                        */
    ATTN__ISA_AVX512 = 2,      /* + AVX-512F/BW/VL                         */
    ATTN__ISA_AVX512_BF16 = 3, /* + AVX512_BF16 (vdpbf16ps)                */
    ATTN__ISA_AMX = 4 /* + AMX-BF16 tiles, the kernel's permission granted */
} attn__isa;

#define ATTN__ISA_COUNT 5

/* What this CPU and OS support (detected once; AMX only when Linux granted
 * the tile state through arch_prctl(ARCH_REQ_XCOMP_PERM), asked once). */
attn__isa attn__isa_cpu(void);

/* The path the kernels take: attn__isa_cpu() capped by ATTN_ISA and by
 * attn__isa_set_max. Cheap after the first call. */
attn__isa attn__isa_get(void);

/* 1 when the path taken is AVX-512 or above and the CPU has AVX512_VNNI
 * (vpdpbusd; the integer matrix-vector products use it). Not a rung of
 * the ladder: Zen 4 and the Xeons since Cascade Lake have it, Skylake-X
 * does not; capping the path below AVX-512 turns it off. */
int attn__isa_vnni(void);

/* Caps the path (tests run each lower path with it; ATTN__ISA_AMX lifts
 * the cap). Not thread-safe: call it while no kernel runs. */
void attn__isa_set_max(attn__isa isa);

/* "scalar", "avx2", "avx512", "avx512_bf16", "amx" (the ATTN_ISA values). */
const char *attn__isa_name(attn__isa isa);

/* One line on how the path was chosen: the CPU's path, the ATTN_ISA value
 * (quoted, escaped) and whether it was understood, and, for AMX, whether
 * the kernel refused the tile state. Static storage. */
const char *attn__isa_describe(void);

#endif /* ATTN_CPU_H */

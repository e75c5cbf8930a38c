/* attn: the command-line front of libattn. Dispatches to one subcommand per
 * file; each returns its exit status (0 ok, 1 failure, 2 usage error). */
#include "cli.h"
#include "cli_ring.h"
#include "blas.h"
#include "cpu.h"
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *name;
    cli_run_fn run;
    void (*help)(void); /* printed for --help; NULL: run prints its own */
    const char *summary;
} cli_command;

static const cli_command commands[] = {
    {"sdpa", cmd_sdpa, cmd_sdpa_help,
     "scaled dot-product attention on .npy files"},
    {"sdpa-backward", cmd_sdpa_backward, cmd_sdpa_backward_help,
     "gradients of attention (dQ, dK, dV, dBias)"},
    {"demo", cmd_demo, NULL,
     "run the tutorial examples and print what they show"},
    {"mha", cmd_mha, cmd_mha_help, "multi-head attention layer on .npy files"},
    {"additive", cmd_additive, cmd_additive_help,
     "additive (Bahdanau) attention on .npy files"},
    {"encoder", cmd_encoder, cmd_encoder_help,
     "Transformer encoder layers on .npy files"},
    {"train", cmd_train, NULL, "train a small Transformer on a toy task"},
    {"generate", cmd_generate, NULL,
     "a trained generation model's output (greedy, sampling, beam)"},
    {"chat", cmd_chat, cmd_chat_help,
     "a conversation with a chat model (ChatML template)"},
    {"eval", cmd_eval, NULL, "accuracy of a trained model on fresh data"},
    {"attend", cmd_attend, NULL,
     "a trained model's prediction and attention maps"},
    {"model", cmd_model, NULL,
     "a pretrained model's config and tensor mapping (attn model info DIR)"},
    {"embed", cmd_embed, cmd_embed_help,
     "sentence embeddings of a pretrained model, and their cosines"},
    {"bench-generate", cmd_bench_generate, NULL,
     "generation: the KV cache against recomputing the prefix"},
    {"bench-layers", cmd_bench_layers, NULL,
     "additive vs dot-product layers: time and memory"},
    {"heatmap", cmd_heatmap, cmd_heatmap_help,
     "draw attention weights as a picture (PNG/SVG/PDF)"},
    {"show", cmd_show, cmd_show_help,
     "print attention weights as a coloured map in the terminal"},
    {"html", cmd_html, cmd_html_help,
     "write an interactive HTML viewer of attention weights"},
    {"stats", cmd_stats, cmd_stats_help,
     "diagnose attention weights (entropy, leakage, ...)"},
    {"compare", cmd_compare, cmd_compare_help,
     "compare two weight files (abs diff, KL)"},
    {"version", cmd_version, NULL, "print the library version"},
    {"bench", cmd_bench, NULL,
     "benchmark the kernels against the sgemm ceiling"},
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

const char *cli_esc(const char *s) {
    static char buf[4][1024];
    static int k = 0;
    k = (k + 1) % 4;
    attn__escape(s ? s : "(null)", buf[k], sizeof buf[k]);
    return buf[k];
}

int cli_fail(const char *cmd, attn_status st, const char *what) {
    const char *detail = attn_last_error(); /* escaped by the library */
    fprintf(stderr, "attn %s: %s: %s%s%s\n", cmd, cli_esc(what),
            attn_strerror(st), detail[0] ? ": " : "", detail);
    return 1;
}

int cli_wrote(const char *cmd, attn_status st, const char *what,
              const char *path) {
    if (st) return cli_fail(cmd, st, what);
    printf("wrote %s\n", path);
    return 0;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    /* messages quote arguments: escape what a terminal would obey */
    char raw[2048], esc[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    attn__escape(raw, esc, sizeof esc);
    fprintf(stderr, "attn %s: %s (see attn %s --help)\n", cmd, esc, cmd);
    return 2;
}

int cli_is_help(const char *arg) {
    return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

int cli_help_asked(int argc, char **argv, void (*help)(void)) {
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) {
            help();
            return 1;
        }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: attn COMMAND [options]   (attn COMMAND --help for "
               "each; attn --version)\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].summary);
}

int cmd_version(const char *cmd, int argc, char **argv) {
    if (argc > 1 && cli_is_help(argv[1])) {
        printf("usage: attn version\n\nPrints the library version and the "
               "kernels' instruction-set path\n(the environment variable "
               "ATTN_ISA=scalar|avx2|avx512|avx512_bf16|amx\nforces a lower "
               "one).\n");
        return 0;
    }
    if (argc > 1)
        return cli_usage_error(cmd, "unexpected argument '%s'", argv[1]);
    printf("attn %s\nkernels: %s\nblas: %s\nsgemm: %s\n", attn_version(),
           attn__isa_describe(), attn__blas_describe(), attn__sgemm_describe());
    return 0;
}

/* libgomp's idle workers spin by default after each parallel region; on a
 * small machine they then compete with the serial code and OpenBLAS between
 * regions (a 2-thread training run measured 4.5x slower than 1 thread, and
 * 1.2x faster once workers sleep). libgomp reads OMP_WAIT_POLICY only when
 * it is loaded, so the command sets it and starts itself again, once,
 * unless the user chose a policy. The flash kernels measured the same
 * either way. Decoding a language model is the opposite case: hundreds of
 * short matrix-vector regions a token, each waking sleeping workers
 * (SmolLM2 on 2 threads: 19.7 tokens/s passive, 78 spinning), so generate
 * and chat keep OpenMP's default. */
/* OpenBLAS likewise reads OPENBLAS_CORETYPE only when it is loaded: where
 * it took this CPU for an older one (blas.h), the command asks for the
 * right kernels the same way, unless the user chose a core. */
static void prefer_runtime_env(char **argv) {
    int again = 0;
    const int decoding = argv[1] && (strcmp(argv[1], "generate") == 0 ||
                                     strcmp(argv[1], "chat") == 0);
    if (!decoding && !getenv("OMP_WAIT_POLICY"))
        again |= setenv("OMP_WAIT_POLICY", "passive", 1) == 0;
    const char *core =
        getenv("OPENBLAS_CORETYPE") ? NULL : attn__blas_core_hint();
    if (core) again |= setenv("OPENBLAS_CORETYPE", core, 1) == 0;
    if (again) execv("/proc/self/exe", argv);
    /* exec failed (no /proc): carry on as loaded */
}

/* An option given twice would silently keep one of its values: refused,
 * except the few that collect a list (generate --input, embed --text).
 * argv[0] is the subcommand. */
static int refuse_repeats(int argc, char **argv) {
    static const char *const lists[][2] = {{"generate", "--input"},
                                           {"embed", "--text"}};
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) return 0; /* help first */
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] != '-' || !a[2]) continue;
        int list = 0;
        for (size_t k = 0; k < sizeof lists / sizeof lists[0]; k++)
            list |= strcmp(argv[0], lists[k][0]) == 0 &&
                    strcmp(a, lists[k][1]) == 0;
        if (list) continue;
        for (int j = 1; j < i; j++)
            if (strcmp(argv[j], a) == 0) {
                char esc[96];
                attn__escape(a, esc, sizeof esc);
                return cli_usage_error(argv[0],
                                       "%s is given twice; it takes one "
                                       "value, and one would be ignored",
                                       esc);
            }
    }
    return 0;
}

/* Under mpirun every rank must join the ring, or the ranks that do wait
 * in MPI_Init for it: a command without --ring in a job of several ranks
 * is refused at once, and a rank that stops before joining says so and
 * exits non-zero, so that mpirun ends the job (the waiting ranks also
 * give up after a bounded wait: cli_ring_init). */
static int run_command(const cli_command *c, int argc, char **argv) {
    int rank, world = cli_mpi_world(&rank), ring = 0;
    for (int i = 2; i < argc; i++) ring |= strcmp(argv[i], "--ring") == 0;
    if (world > 1 && !ring) {
        fprintf(stderr,
                "attn: rank %d of %d: 'attn %s' runs under mpirun with %d "
                "ranks but without --ring: each rank would do the whole job "
                "alone (give every rank the same command with --ring "
                "LAYOUT, or run it without mpirun)\n",
                rank, world, c->name, world);
        return 2;
    }
    int rc = refuse_repeats(argc - 1, argv + 1);
    if (!rc && !(c->help && cli_help_asked(argc - 1, argv + 1, c->help)))
        rc = c->run(c->name, argc - 1, argv + 1);
    if (world > 1 && !cli_ring_joined()) {
        fprintf(stderr,
                "attn: rank %d of %d stopped before joining the ring (exit "
                "status %d): the other ranks cannot go on\n",
                rank, world, rc);
        if (rc == 0) rc = 1;
    }
    return rc;
}

int main(int argc, char **argv) {
    prefer_runtime_env(argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (cli_is_help(argv[1])) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0)
        return cmd_version("version", argc - 1, argv + 1);
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return run_command(&commands[i], argc, argv);
    char esc[256];
    attn__escape(argv[1], esc, sizeof esc);
    fprintf(stderr, "attn: unknown command '%s'\n", esc);
    usage(stderr);
    return 2;
}

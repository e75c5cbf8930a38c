/* Shared pieces of the attn command-line tool. Only tools/ and bench/ print
 * or exit; every subcommand returns its exit status to main. */
#ifndef ATTN_CLI_H
#define ATTN_CLI_H

#include "attn.h"
#include "attn_layers.h"
#include "attn_train.h"
#include "attn_viz.h"
#include "attn_transformer.h"
#include "attn_pretrained.h"
#include "attn_tokenizer.h"

#include <stdio.h>

/* One subcommand: attn NAME [args]. cmd is the name its messages give
 * (the table's, or e.g. "bench --decode" for a mode of another); argv[0]
 * is the subcommand's name as typed. */
typedef int (*cli_run_fn)(const char *cmd, int argc, char **argv);

/* Prints "attn NAME: WHAT: <status class>: <library message>" to stderr and
 * returns 1 (the exit status of a failed command). */
int cli_fail(const char *cmd, attn_status st, const char *what);

/* After writing path: "wrote PATH" on stdout and 0, or (st not ATTN_OK)
 * cli_fail's message naming what and 1. */
int cli_wrote(const char *cmd, attn_status st, const char *what,
              const char *path);

/* s with control bytes and invalid UTF-8 as \xNN, for messages that quote
 * input (one of 4 rotating static buffers: valid until the 4th next call). */
const char *cli_esc(const char *s);

/* Prints "attn NAME: <message>" to stderr and returns 2 (usage error). */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
int cli_usage_error(const char *cmd, const char *fmt, ...);

/* True if argv[i] is "--help" or "-h". */
int cli_is_help(const char *arg);
/* If any of argv[1 .. argc - 1] is, calls help() and returns 1. */
int cli_help_asked(int argc, char **argv, void (*help)(void));

/* ---- .npy arrays for attention (cli_io.c) ----------------------------
 * Functions returning int give 0 on success, or the exit status of the
 * failed command after printing why (1 failure, 2 usage error). */

/* An attention input read from a .npy file. The file's rank says how it maps
 * to (B, H, L, D): rank 2 (L, D) is (1, 1, L, D), rank 3 (B, L, D) is
 * (B, 1, L, D), rank 4 is (B, H, L, D). */
typedef struct {
    attn_npy npy;          /* owns the data                 */
    attn_tensor t;         /* contiguous 4-d view of it     */
    int rank;              /* 2, 3 or 4: the file's rank (5: weights only) */
    int64_t layers, batch; /* rank-5 weights: t's first axis is layer * batch */
    /* weights: the names of the file's leading axes ("layer", "batch",
     * "head"), rank - 2 of them; view[k] the axis of t (0 or 1) that
     * leading axis k became (rank 5: layer and batch both 0) */
    const char *axis[3];
    int naxes, view[3];
} cli_tensor;

/* Loads a float array (f32, f16 or f64, kept as in the file; integer
 * dtypes refused). name ("q", ...) appears in messages. Every extent must
 * be >= 1. Callers convert f64 to f32 unless they run the reference. */
/* "(2, 3, 4)" for a shape (cli_io.c). */
void cli_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape);
/* An array of rank 2 (L, D), 3 (B, L, D) or 4 as the (B, H, L, D) shape
 * of an attention tensor (cli_load_tensor's rule); 1 with a message. */
int cli_to_bhld(const char *cmd, const char *name, const attn_npy *a,
                int64_t out[4]);

int cli_load_tensor(const char *cmd, const char *path, const char *name,
                    cli_tensor *out);

/* Converts t to dtype (f32, f16, bf16 or f64) in place. */
int cli_tensor_convert(const char *cmd, cli_tensor *t, attn_dtype dtype);

void cli_tensor_free(cli_tensor *t);

/* Usage error naming every one of names[i] whose values[i] is NULL
 * ("missing --k and --out"); 0 when all are given. */
int cli_require(const char *cmd, const char *const *names,
                const char *const *values, int n);

/* Usage error if an output path (outs[i], NULL: not given) is one of the
 * inputs or an earlier output: the same file by device and inode where it
 * exists, by its folder's real path and name where not (symbolic links
 * followed, dangling ones too); then cli_check_outputs on the outputs. */
int cli_distinct_outputs(const char *cmd, const char *const *in_names,
                         const char *const *ins, int nin,
                         const char *const *out_names, const char *const *outs,
                         int nout);

/* Every output path given (paths[i], NULL: not given) checked before the
 * work starts by the library writer's own rule (attn__check_output: a
 * folder, a dangling link, a missing or read-only folder are refused);
 * the message names the option names[i]. 1 after the message, else 0. */
int cli_check_outputs(const char *cmd, const char *const *names,
                      const char *const *paths, int n);

/* The same for an output folder (demo --out, attend --out): an existing
 * folder that takes files, or a new name in one that does. */
int cli_check_out_dir(const char *cmd, const char *name, const char *path);

/* The dtype of the .npy file at path as NumPy names it ("bool", "int32"),
 * for messages; "?" if it cannot be read. */
const char *cli_npy_descr(const char *path, char *buf, size_t cap);

/* --compute-dtype S: f32, f16, bf16 or f64 into *dt (usage error else;
 * S NULL leaves *dt). */
int cli_compute_dtype(const char *cmd, const char *s, attn_dtype *dt);

/* The inputs of sdpa and sdpa-backward: the compute dtype of
 * --compute-dtype cd (f64 with the reference kernel only), q, k, v
 * loaded from paths with one dtype and converted (to the compute dtype
 * when given, else f64 files read as f32, f32 and f16 kept); *fdt is the
 * outputs' dtype (the inputs', promoted as NumPy and PyTorch do). */
/* --opt on|off|auto into *out as 1, 0 or -1 (auto). */
int cli_on_off_auto(const char *cmd, const char *opt, const char *v, int *out);

int cli_sdpa_inputs(const char *cmd, const char *cd, attn_impl impl,
                    const char *const paths[3], cli_tensor *qkv[3],
                    attn_dtype *compute, attn_dtype *fdt);

/* Options that each take a value, e.g. {"--q", &qp}: every argument of
 * argv[1 .. argc - 1] must be one of them followed by its value. */
typedef struct {
    const char *name;
    const char **slot;
} cli_path_opt;
int cli_parse_paths(const char *cmd, int argc, char **argv,
                    const cli_path_opt *opts, size_t n);

/* The options of a subcommand as a table, read by cli_parse_args. A value
 * is checked when it is read: integers and finite numbers within [lo, hi]
 * (open: CLI_OPEN_LO excludes lo, CLI_OPEN_HI hi), seeds any unsigned 64-bit
 * number, a choice one of its names. */
typedef enum {
    CLI_OPT_STR,   /* const char **slot                                 */
    CLI_OPT_LIST,  /* repeatable: (const char **)slot[(*count)++]        */
    CLI_OPT_FLAG,  /* int *slot set to 1; takes no value                 */
    CLI_OPT_I64,   /* int64_t *slot                                      */
    CLI_OPT_INT,   /* int *slot                                          */
    CLI_OPT_U64,   /* uint64_t *slot                                     */
    CLI_OPT_F64,   /* double *slot                                       */
    CLI_OPT_CHOICE /* int *slot: the value of the name given (choices)   */
} cli_opt_kind;
/* One name a choice takes and the number it stands for; a list of them
 * ends with {NULL, 0}. */
typedef struct {
    const char *name;
    int value;
} cli_choice;
/* The value of the name v among choices into *out; 1 if v is none. */
int cli_pick(const cli_choice *choices, const char *v, int *out);
/* dot and additive (attn_attention_type), for --attention and --cross. */
extern const cli_choice cli_attention_types[];
#define CLI_OPEN_LO 1
#define CLI_OPEN_HI 2
typedef struct {
    const char *name; /* "--count" */
    cli_opt_kind kind;
    void *slot;
    double lo, hi;
    int open;   /* CLI_F64: CLI_OPEN_LO, CLI_OPEN_HI, both or 0 */
    int *count; /* CLI_OPT_LIST: entries so far (slot holds argc of them) */
    const cli_choice *choices; /* CLI_OPT_CHOICE */
} cli_opt;
/* Table rows: CLI_I64("--count", &count, 1, INT64_MAX) and so on. */
#define CLI_STR(name, p)                                                       \
    { (name), CLI_OPT_STR, (p), 0, 0, 0, NULL, NULL }
#define CLI_LIST(name, p, n)                                                   \
    { (name), CLI_OPT_LIST, (p), 0, 0, 0, (n), NULL }
#define CLI_FLAG(name, p)                                                      \
    { (name), CLI_OPT_FLAG, (p), 0, 0, 0, NULL, NULL }
#define CLI_I64(name, p, lo, hi)                                               \
    { (name), CLI_OPT_I64, (p), (double)(lo), (double)(hi), 0, NULL, NULL }
#define CLI_INT(name, p, lo, hi)                                               \
    { (name), CLI_OPT_INT, (p), (double)(lo), (double)(hi), 0, NULL, NULL }
#define CLI_U64(name, p)                                                       \
    { (name), CLI_OPT_U64, (p), 0, 0, 0, NULL, NULL }
/* a number in [lo, hi], or with open (CLI_OPEN_LO | CLI_OPEN_HI) without
 * that end */
#define CLI_F64(name, p, lo, hi, open)                                         \
    { (name), CLI_OPT_F64, (p), (lo), (hi), (open), NULL, NULL }
#define CLI_CHOICE(name, p, choices)                                           \
    { (name), CLI_OPT_CHOICE, (p), 0, 0, 0, NULL, (choices) }
/* Reads argv[1 .. argc - 1]: "--name value" (or "--flag") by the table,
 * anything else into pos[0 .. npos - 1] in order. 0, or 2 after the usage
 * message (unexpected argument, unknown option, missing or bad value). */
int cli_parse_args(const char *cmd, int argc, char **argv, const cli_opt *opts,
                   size_t n, const char **pos, int npos);
/* One option with a value by the table: 0 when arg is a row of opts and
 * val a value of it, 1 for a bad value, -1 when arg is none of them (the
 * contract of cli_layer_own.opt). */
int cli_opt_set(const cli_opt *opts, size_t n, const char *arg,
                const char *val);
/* After cli_parse_args took argv with opts: the last option given among
 * opts[lo .. hi - 1] (its argument), or NULL if none was. */
const char *cli_last_given(int argc, char **argv, const cli_opt *opts, size_t n,
                           size_t lo, size_t hi);
/* The sampling options of the Llama-family commands (--max-new-tokens
 * --sample --temperature --top-k --top-p --seed --threads) as table rows
 * into t[0 .. CLI_LLAMA_GEN_NOPTS - 1]. */
#define CLI_LLAMA_GEN_NOPTS 7
void cli_llama_gen_table(attn_llama_gen_opts *o, cli_opt *t);

/* Allocates a zeroed contiguous (d0, d1, d2, d3) tensor of dtype, checking
 * the size; free t->data with free(). */
int cli_alloc_tensor(const char *cmd, const char *name, attn_dtype dtype,
                     int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                     attn_tensor *t);

/* Writes a contiguous array whose leading axes are (B, H, ...) with the rank
 * convention of an input of rank `rank`: 4 keeps every axis, 3 drops H
 * (which must be 1), 2 drops B and H (both 1). ndim is 3 (e.g. lse
 * (B, H, Lq)) or 4 (e.g. out (B, H, Lq, Dv)). */
int cli_save_like(const char *cmd, const char *path, attn_dtype dtype,
                  void *data, int ndim, const int64_t *shape, int rank);

/* The dtype outputs are written in: the wider of the inputs' file dtype
 * and the compute dtype when --compute-dtype was given (f16 with bf16
 * gives f32), as NumPy and PyTorch promote; f16 inputs give f16 outputs. */
attn_dtype cli_out_dtype(attn_dtype in, int given, attn_dtype compute);
/* cli_save_like with the data (dtype) converted to file_dtype first. */
int cli_save_like_as(const char *cmd, const char *path, attn_dtype dtype,
                     void *data, int ndim, const int64_t *shape, int rank,
                     attn_dtype file_dtype);
/* Usage error unless q, k, v (and more: n tensors named names[i]) come
 * from files of one dtype: mixed inputs are refused, as PyTorch's SDPA
 * refuses them. */
int cli_same_dtype(const char *cmd, const char *const *names,
                   const cli_tensor *const *t, int n);
/* Writes any array as .npy. */
int cli_save_array(const char *cmd, const char *path, attn_dtype dtype,
                   void *data, int ndim, const int64_t *shape);

/* The default options of a layer's forward on threads kernel threads. */
attn_layer_opts cli_threads_opts(int threads);

/* Strict number parsing: the whole string must be the number. 0 = ok. */
int cli_parse_double(const char *s, double *out);
int cli_parse_i64(const char *s, int64_t *out);
int cli_parse_u64(const char *s, uint64_t *out);

/* ---- the SDPA options shared by every attention subcommand (cli_io.c) --
 *
 *   cli_sdpa_args a;
 *   cli_sdpa_args_init(&a);
 *   if ((rc = cli_sdpa_args_parse(cmd, &argc, argv, &a))) goto done;
 *   ... argv now holds only the options this subcommand owns ...
 *   ... load q, k ...
 *   if ((rc = cli_sdpa_args_bind(cmd, &a, B, H, Lq, Lk))) goto done;
 *   attn_sdpa_forward(..., &a.opts, ...);
 *   done: cli_sdpa_args_free(&a);
 *
 * Options: --scale --causal --align --window --key-lengths --query-lengths
 * --mask --mask-convention --bias --block-sparse --random-blocks --impl
 * --threads --dropout --seed --softcap --alibi --alibi-slopes --sinks
 * --doc-ids --cu-seqlens --cu-seqlens-k --rope --rope-theta --rope-dim
 * --rope-scaling --rope-offset (see cli_sdpa_args_help). */
#define CLI_SDPA_NFILES 11 /* the files those options may name */
typedef struct {
    attn_sdpa_opts opts; /* complete after cli_sdpa_args_bind          */
    attn_npy key_lengths, query_lengths; /* i64, [B]                    */
    attn_npy mask;   /* u8 keep-mask after the convention            */
    attn_npy bias;   /* f32 or f64                                   */
    attn_npy layout; /* u8 block layout (nb_q, nb_k) or (H, nb_q, nb_k) */
    attn_tensor keep_t, bias_t;   /* 4-d views of mask and bias           */
    attn_npy sinks, alibi_slopes; /* f64 [H]: --sinks, --alibi-slopes    */
    attn_npy doc_q, doc_k;        /* i64 (B, L) or (L,): --doc-ids        */
    void *doc_buf;                /* doc ids of (L,) files repeated B times */
    char *doc_paths;              /* --doc-ids's value, cut at its comma    */
    int64_t *cu[2], ncu[2];       /* --cu-seqlens, --cu-seqlens-k starts    */
    int causal_set, align_set;
    /* --rope STYLE, --rope-theta, --rope-dim, --rope-scaling, --rope-offset */
    attn_rope rope;
    int rope_set;
    int64_t rope_offset;
    int64_t *rope_pos; /* [Lq + Lk] with an offset: q's, then k's        */
    int mask_was_bias; /* a float --mask became the bias (PyTorch rule) */
    /* which options this command takes besides the mask (CLI_OPTS_*; set
     * after init; 0 = all): the others are refused as having no effect */
    unsigned kinds;
    /* the files the options named (NULL: not given), for
     * cli_distinct_outputs */
    const char *files[CLI_SDPA_NFILES], *file_opt[CLI_SDPA_NFILES];
} cli_sdpa_args;

#define CLI_OPTS_SCALE 1u   /* --scale                               */
#define CLI_OPTS_THREADS 2u /* --threads                             */
#define CLI_OPTS_KERNEL 4u  /* --impl, --dropout, --seed             */
#define CLI_OPTS_MASK 8u    /* the mask options (always taken)       */
#define CLI_OPTS_ALL 15u

void cli_sdpa_args_init(cli_sdpa_args *a);

/* Consumes the shared options from argv[1 .. *argc - 1] (argv[0] is the
 * subcommand), loading the files they name, and compacts argv to what is
 * left (--help included). */
int cli_sdpa_args_parse(const char *cmd, int *argc, char **argv,
                        cli_sdpa_args *a);

/* Checks the options against the attention's (B, H, Lq, Lk): lengths have
 * B entries, the block layout covers ceil(Lq / block) x ceil(Lk / block);
 * then attn_mask_check. */
int cli_sdpa_args_bind(const char *cmd, cli_sdpa_args *a, int64_t B, int64_t H,
                       int64_t Lq, int64_t Lk);

void cli_sdpa_args_free(cli_sdpa_args *a);

/* The rotary options (cli_rope_args.c): one --rope* option's value, and
 * after the scan their check (--rope-* needs --rope) and positions. */
int cli_rope_parse(const char *cmd, const char *opt, const char *v,
                   cli_sdpa_args *a);
int cli_rope_bind(const char *cmd, cli_sdpa_args *a, int64_t Lq, int64_t Lk);

/* Splits "A,B" (or "A,B,C") of v into parts in buf (cap bytes); returns
 * the number found (max + 1 when there are more, 0 when v is too long). */
int cli_split_commas(const char *v, char *buf, size_t cap, char **parts,
                     int max);

/* Prints the options' help block (for each subcommand's --help). */
void cli_sdpa_args_help(FILE *f);
/* The same for a command taking only the options in kinds (CLI_OPTS_*). */
void cli_args_help(FILE *f, unsigned kinds);

/* ---- printing (cli_print.c) ------------------------------------------ */

/* Prints a rows x cols matrix (row stride ld) with a title, aligned
 * columns and `decimals` digits after the point. */
void cli_print_matrix(FILE *f, const char *title, const float *m, int64_t rows,
                      int64_t cols, int64_t ld, int decimals);

/* Prints a rows x cols 0/1 mask as a grid ('1' attends, '.' masked). */
void cli_print_mask(FILE *f, const char *title, const uint8_t *m, int64_t rows,
                    int64_t cols, int64_t ld);

/* OpenBLAS threads for the training commands when T > 1 (OpenMP follows
 * opts.threads; T = 1 keeps BLAS on the caller's thread inside the library;
 * 0 leaves the defaults). A model this small runs fastest on one. */
void cli_train_threads(int64_t threads);

/* ---- layer subcommands (cli_layers.c) ---------------------------------
 *
 *   cli_layer l;
 *   cli_layer_init(&l, qkv);
 *   rc = cli_sdpa_args_parse(cmd, &argc, argv, &l.a);
 *   rc = cli_layer_parse(cmd, &l, argc, argv, &own);
 *   cli_layer_check, cli_layer_load
 *   ... load (attn_X_load into l.prm, l.loaded = 1) or
 *       cli_layer_alloc_params + attn_X_init; then cli_layer_save_params ...
 *   cli_layer_alloc, attn_X_forward, cli_save_seq
 *   done: cli_layer_free(&l);
 */

/* A sequence input (L, D) or (B, L, D) as contiguous f32 (B = 1 for rank 2). */
typedef struct {
    cli_tensor t;
    int64_t B, L, D;
    float *x;
} cli_seq;

/* Saves data with shape [lead...] (B if rank == 3) rows cols. */
int cli_save_seq(const char *cmd, const char *path, float *data, int rank,
                 int nlead, const int64_t *lead, int64_t B, int64_t rows,
                 int64_t cols);

/* Where a layer's parameters come from. */
typedef struct {
    const char *load, *save;
    uint64_t seed;
    int seeded;
} cli_param_src;

void cli_param_help(FILE *f);

/* What a layer subcommand holds from its options to its saved outputs. */
typedef struct {
    int qkv; /* inputs --query, --key, --value; else --x */
    cli_sdpa_args a;
    cli_param_src src;
    const char *in[3]; /* their paths (--x in in[0])              */
    const char *out_path, *weights_path;
    cli_seq q, k, v;      /* the inputs given (k, v may stay empty)  */
    const cli_seq *K, *V; /* key and value: k, v or else the query   */
    float *prm;           /* the parameters                          */
    int loaded;           /* prm came from attn_X_load               */
    float *ws, *out, *w;  /* workspace, output, weights (--weights)  */
} cli_layer;

void cli_layer_init(cli_layer *l, int qkv);

/* Takes an option with a value that every layer subcommand has: --out,
 * --weights, --params, --save-params, --init-seed, and the inputs.
 * *used = 1 if arg was one; returns nonzero for a bad value (the caller
 * says so). */
int cli_layer_opt(cli_layer *l, const char *arg, const char *val, int *used);

/* A layer subcommand's own options, beside the shared ones: flag(ctx, arg)
 * sets a flag and returns 1 if arg is one; opt(ctx, arg, val) returns 0
 * for an option it took, 1 for a bad value, -1 for no option of its. The
 * error messages of a bad value come in two wordings (msgs). */
typedef enum {
    CLI_MSG_TAKES = 0, /* "--x takes a number / a positive integer, not 'v'" */
    CLI_MSG_BAD_VALUE = 1 /* "bad value 'v' for --x"                         */
} cli_layer_msgs;
typedef struct {
    int (*flag)(void *ctx, const char *arg);
    int (*opt)(void *ctx, const char *arg, const char *val);
    void *ctx;
    cli_layer_msgs msgs;
} cli_layer_own;

/* The options after cli_sdpa_args_parse: the shared ones (cli_layer_opt)
 * and the command's own. Returns the exit status of a usage error, or 0. */
int cli_layer_parse(const char *cmd, cli_layer *l, int argc, char **argv,
                    const cli_layer_own *own);

/* The input (--query or --x) and --out are given, exactly one of --params
 * and --init-seed, and with --init-seed the option `need` (have != 0; need
 * NULL: none). */
int cli_layer_check(const char *cmd, const cli_layer *l, const char *need,
                    int have);

/* Loads the inputs named by in[] as f32 sequences. Key and value default
 * to the query (self-attention) and must share its rank and batch, and
 * each other's length. */
int cli_layer_load(const char *cmd, cli_layer *l);

/* n floats of parameters for --init-seed (n > 0). */
int cli_layer_alloc_params(const char *cmd, cli_layer *l, int64_t n);

/* Workspace (wsn floats), output (nout) and, with --weights, weights (nw). */
int cli_layer_alloc(const char *cmd, cli_layer *l, size_t wsn, int64_t nout,
                    int64_t nw);

void cli_layer_free(cli_layer *l);

/* ---- pictures and diagnostics (cli_viz.c) ----------------------------- */

/* A whitespace-separated token list ("The cat sat"); v[i] point into buf. */
typedef struct {
    char *buf;
    char **v;
    int64_t n;
} cli_tokens;

int cli_tokens_parse(const char *cmd, const char *opt, const char *s,
                     cli_tokens *t);
/* Usage error unless t is empty (not given) or has n tokens. */
int cli_tokens_expect(const char *cmd, const char *opt, const cli_tokens *t,
                      int64_t n, const char *axis);
void cli_tokens_free(cli_tokens *t);

/* Axis labels: --tokens for both axes, or one list per axis (xopt for the
 * keys, yopt for the queries, e.g. "--x-tokens", "--y-tokens"). */
typedef struct {
    cli_tokens x, y, both;
    const char *xopt, *yopt;
} cli_labels;

void cli_labels_init(cli_labels *l, const char *xopt, const char *yopt);
/* 1 if arg is one of the label options (then *rc is its parse result). */
int cli_labels_opt(const char *cmd, cli_labels *l, const char *arg,
                   const char *val, int *rc);
/* The labels of the key (x != 0) or query axis, which must have n tokens
 * (axis names it in the message); *labels NULL when none were given. */
int cli_labels_axis(const char *cmd, const cli_labels *l, int x, int64_t n,
                    const char *axis, const char *const **labels);
/* Both axes' labels of the weights W (B, H, Lq, Lk) and the SDPA options
 * bound to its shape (the mask drawn over the maps). */
int cli_labels_bind(const char *cmd, const cli_labels *l, cli_sdpa_args *a,
                    const attn_tensor *W, const char *const **x_labels,
                    const char *const **y_labels);
void cli_labels_free(cli_labels *l);

/* The option loop of the viz commands, one step at a time (as getopt):
 * from argv[*i + 1], a bare argument (or "-") is the weights file (one:
 * a usage error for a second), a name in flags (NULL-terminated, or NULL)
 * comes back with *val NULL, any other option with its value (a usage
 * error when none is left). 1 while an option is ready in *arg, else 0
 * with *rc 0 at the end or the error's status. Start with *i = 0. */
int cli_viz_next(const char *cmd, int argc, char **argv, int *i,
                 const char *const *flags, const char **path, const char **arg,
                 const char **val, int *rc);

/* --map B,H (or L,B,H): the indices into m, their number into *count. */
int cli_parse_map(const char *cmd, const char *s, int64_t m[3], int *count);
/* The map (*b, *h) of w's 4-d view that --map names: B,H for ranks 2..4,
 * L,B,H for rank 5; usage error if outside w. */
int cli_check_map(const char *cmd, const cli_tensor *w, const int64_t m[3],
                  int count, int64_t *b, int64_t *h);

/* Weights file: rank 2 (Lq, Lk), 3 (batch, Lq, Lk), 4 (batch, head, Lq,
 * Lk) or 5 (layer, batch, head, Lq, Lk), the last seen as 4-d with
 * layer * batch maps on the first axis; then --axes (cli_weights_axes;
 * NULL: the rank's names). A NULL path is the usage error "missing the
 * weights file". */
int cli_load_weights(const char *cmd, const char *path, const char *axes,
                     cli_tensor *w);
/* "layer 1 batch 0 head 3", "batch 0 head 3" or "batch 2": map (n, h) of
 * w's 4-d view named by the file's axes. */
void cli_map_name(const cli_tensor *w, int64_t n, int64_t h, char *buf,
                  size_t cap);
/* Every map of W (layers, heads, Lq, Lk) in a grid, a row per layer and a
 * column per head, each titled "layer l, head h" (attn_heatmap_grid_write
 * names the first axis batch). */
attn_status cli_layer_grid_write(const char *path, const attn_tensor *W,
                                 const attn_heatmap_opts *o);
/* The q-quantile of the finite values v[i] with keep[i] set (0 if none
 * or out of memory), the scale of a picture that a few outliers must not
 * set; *top gets the largest. */
double cli_percentile(const float *v, const uint8_t *keep, int64_t n, double q,
                      double *top);
/* "(layer, head, query, key)": the axes of the file. */
void cli_axes_str(const cli_tensor *w, char *buf, size_t cap);
/* --axes NAMES: the names of the weights' leading axes (comma-separated,
 * each layer, batch or head, rank - 2 of them), for files whose rank does
 * not say them (PyTorch's unbatched (head, Lq, Lk), a stack of layers
 * (layer, head, Lq, Lk)); the 4-d view follows them. s NULL: the rank's
 * names. */
int cli_weights_axes(const char *cmd, cli_tensor *w, const char *s);
#define CLI_AXES_HELP                                                            \
    "  --axes NAMES  the names of W's axes before (Lq, Lk), comma-separated\n"   \
    "                (layer, batch, head): files attn writes say them by\n"      \
    "                their rank (batch; batch,head; layer,batch,head); others\n" \
    "                may need e.g. --axes head or --axes layer,head\n"

/* ---- the demo gallery (gallery_page.c, demo_*.c) ---------------------- */

#define GALLERY_MAX_ITEMS 64
#define GALLERY_MAX_SECTIONS 16

typedef struct {
    char file[128]; /* relative to the gallery directory */
    char caption[512];
    int section;
} demo_item;

typedef struct {
    const char *dir;
    char path[4096]; /* scratch for gallery_path */
    struct {
        char title[160];
        char note[640]; /* e.g. how a part was measured */
        char
            table[4096]; /* rows of tab-separated cells, the first the header */
    } sec[GALLERY_MAX_SECTIONS];
    int nsec;
    demo_item item[GALLERY_MAX_ITEMS];
    int nitems;
    int quick; /* attn demo --quick: part 8 times B = 2, once */
} demo_gallery;

void gallery_init(demo_gallery *g, const char *dir);
/* dir/file in a buffer of g (valid until the next call). */
const char *gallery_path(demo_gallery *g, const char *file);
void gallery_section(demo_gallery *g, const char *title);
/* Records a picture of the current section and prints its path. */
void gallery_add(demo_gallery *g, const char *file, const char *caption);
/* gallery_add after writing file went well (st 0), else cli_fail's
 * message naming what (1). */
int gallery_wrote(const char *cmd, demo_gallery *g, attn_status st,
                  const char *what, const char *file, const char *caption);
/* A note under the current section's title. */
void gallery_note(demo_gallery *g, const char *text);
/* Appends a row of tab-separated cells to the current section's table
 * (the first row is the header); 1 if it does not fit. */
int gallery_table_row(demo_gallery *g, const char *cells);
int gallery_write_index(const char *cmd, demo_gallery *g);
/* Part 8: additive vs dot-product speed on a reduced shape (demo_speed.c). */
int gallery_speed(const char *cmd, demo_gallery *g);
/* Part 10: a small reversal model trained on the spot (demo_train.c). */
int gallery_reversal(const char *cmd, demo_gallery *g);
/* The experiments 3..10 (1 and 2 are drawn by cmd_demo.c). */
int gallery_run(const char *cmd, demo_gallery *g);

/* Subcommands (one file each). */
/* The --help texts that main prints for its table's commands (the others,
 * whose help depends on their arguments, print their own). */
void cmd_compare_help(void);
void cmd_sdpa_help(void);
void cmd_sdpa_backward_help(void);
void cmd_mha_help(void);
void cmd_additive_help(void);
void cmd_encoder_help(void);
void cmd_heatmap_help(void);
void cmd_show_help(void);
void cmd_html_help(void);
void cmd_stats_help(void);
void cmd_chat_help(void);
void cmd_embed_help(void);
int cmd_version(const char *cmd, int argc, char **argv);
int cmd_sdpa(const char *cmd, int argc, char **argv);
int cmd_sdpa_backward(const char *cmd, int argc, char **argv);
int cmd_demo(const char *cmd, int argc, char **argv);
int cmd_train(const char *cmd, int argc, char **argv);
int cmd_eval(const char *cmd, int argc, char **argv);
int cmd_attend(const char *cmd, int argc, char **argv);
int cmd_mha(const char *cmd, int argc, char **argv);
int cmd_additive(const char *cmd, int argc, char **argv);
int cmd_encoder(const char *cmd, int argc, char **argv);
int cmd_bench_layers(const char *cmd, int argc, char **argv);
/* --quick, --threads T (0..4096) or --reps N (1..1000) of a benchmark
 * mode at argv[*i] (*i moves to its value): 0 when taken, -1 when argv[*i]
 * is none of them, else the usage error's status (cmd_bench_layers.c). */
int cli_bench_opt(const char *cmd, int argc, char **argv, int *i, int *quick,
                  int *threads, int *reps);
int cmd_bench_decode(const char *cmd, int argc, char **argv);
int cmd_show(const char *cmd, int argc, char **argv);
int cmd_html(const char *cmd, int argc, char **argv);
int cmd_heatmap(const char *cmd, int argc, char **argv);
int cmd_stats(const char *cmd, int argc, char **argv);
int cmd_compare(const char *cmd, int argc, char **argv);
int cmd_bench(const char *cmd, int argc, char **argv);
/* Pretrained models (cmd_pretrained.c): attn model, attn embed, and the
 * folder forms of attn attend DIR and attn bench --model DIR. */
int cmd_model(const char *cmd, int argc, char **argv);
int cmd_embed(const char *cmd, int argc, char **argv);
int cli_attend_pretrained(const char *cmd, int argc, char **argv);
/* The per-layer PNG grids and the HTML viewer of N x H heads of n x n
 * weights w into the folder out (cmd_pretrained.c). */
int cli_attend_pictures(const char *cmd, const char *out, float *w,
                        const char *const *labels, int64_t N, int64_t H,
                        int64_t n, const char *text);
/* Llama-family folders (cmd_llama.c): 1 when dir's config.json names
 * model_type llama, mistral or qwen2; attn generate / attend / model info
 * on them. */
int cli_is_llama_dir(const char *dir);
int cli_llama_generate(const char *cmd, int argc, char **argv);
int cli_llama_attend(const char *cmd, int argc, char **argv);
int cli_llama_info(const char *dir);
/* attn chat FILE (cmd_chat.c). */
int cmd_chat(const char *cmd, int argc, char **argv);
/* Text streamed as ids come (ids written when tok is NULL); buf holds
 * attn_bpe_stream_max(tok) + 8 bytes. cli_llama_on_token is an
 * attn_llama_token_fn over a cli_streamer. */
typedef struct {
    const struct attn_bpe *tok;
    attn_bpe_stream st;
    char *buf;
    size_t cap;
} cli_streamer;
int cli_llama_on_token(void *user, int32_t id);
/* Monotonic seconds. */
double cli_now_s(void);
int cli_bench_model(const char *cmd, int argc, char **argv);

int cmd_generate(const char *cmd, int argc, char **argv);
int cmd_bench_generate(const char *cmd, int argc, char **argv);

/* The options both kinds of attn train take (cmd_train.c, cmd_train_gen.c,
 * read by cli_train_parse): -1 (0 for flags) where not given. */
typedef struct {
    const char *task, *save, *resume;
    const char *run_opt; /* the last option given that defines a new run */
    int64_t layers, heads, dmodel, ff, steps, batch, warmup, length, min_len;
    int64_t save_every, until, eval_n, threads;
    double lr, dropout;
    uint64_t seed;
    int seed_set, post_norm, dtype;
} cli_train_args;
/* Reads argv into *t: the shared options, the command's own run[0 ..
 * nrun - 1] (options that define a new run, refused with --resume) and
 * other[0 .. nother - 1], the task as the one bare argument (tasks lists
 * them for the message when it is missing); checks --save's path. 0, or
 * the exit status after the message. */
int cli_train_parse(const char *cmd, int argc, char **argv, cli_train_args *t,
                    const cli_opt *run, size_t nrun, const cli_opt *other,
                    size_t nother, const char *tasks);
/* t's optimizer, batch, schedule, dropout, seed, threads and dtype over
 * the fields of a trainer's config (attn_train_config and
 * attn_gen_train_config both have them). */
void cli_train_apply(const cli_train_args *t, attn_adamw_config *optim,
                     int64_t *batch, int64_t *steps, double *dropout,
                     uint64_t *seed, int *threads, attn_dtype *dtype);

/* Generation models (cmd_train_gen.c, cmd_generate.c, cmd_attend_gen.c):
 * whether path is a generation checkpoint (magic ATTNGENM), whether the
 * arguments of attn train ask for one, and the subcommands they take. */
int cli_gen_checkpoint(const char *path);
int cli_train_gen_wanted(int argc, char **argv);
int cmd_train_gen(const char *cmd, int argc, char **argv);
int cmd_eval_gen(const char *cmd, int argc, char **argv);
int cmd_attend_gen(const char *cmd, int argc, char **argv);
/* Same-field cross-attention weight of a date model per (layer, head)
 * over count fresh dates: score[layers * heads] (cmd_attend_gen.c). */
int cli_gen_alignment(const char *cmd, const attn_gen_train_config *c,
                      const float *params, int64_t count, int threads,
                      double *score);
/* Evaluates the trainer's model on count fresh examples of its task
 * (seed) and prints exact match and characters (cmd_train_gen.c). */
int cli_gen_eval(const char *cmd, const attn_gen_trainer *tr, int64_t count,
                 uint64_t seed, const attn_generate_opts *o);
/* The gallery's part 11 (demo_generate.c). */
int gallery_dates(const char *cmd, demo_gallery *g);

#endif

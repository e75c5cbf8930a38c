/* The rotary options of the attention subcommands (--rope, --rope-theta,
 * --rope-dim, --rope-scaling, --rope-offset): their values, and their
 * binding to the shapes of q and k (an offset becomes positions). */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --rope, --rope-theta, --rope-dim, --rope-scaling, --rope-offset. */
int cli_rope_parse(const char *cmd, const char *opt, const char *v,
                   cli_sdpa_args *a) {
    attn_rope *r = &a->rope;
    if (strcmp(opt, "--rope") == 0) {
        static const cli_choice styles[] = {
            {"neox", ATTN_ROPE_NEOX},
            {"interleaved", ATTN_ROPE_INTERLEAVED},
            {NULL, 0}};
        int k;
        if (cli_pick(styles, v, &k))
            return cli_usage_error(cmd,
                                   "--rope takes neox or interleaved, not "
                                   "'%s'",
                                   v);
        r->style = (attn_rope_style)k;
        a->rope_set = 1;
    } else if (strcmp(opt, "--rope-theta") == 0) {
        if (cli_parse_double(v, &r->theta) || !(r->theta > 1) ||
            isinf(r->theta))
            return cli_usage_error(cmd,
                                   "--rope-theta must be a number > 1, not "
                                   "'%s'",
                                   v);
    } else if (strcmp(opt, "--rope-dim") == 0) {
        if (cli_parse_i64(v, &r->rotary_dim) || r->rotary_dim < 2 ||
            r->rotary_dim % 2)
            return cli_usage_error(cmd,
                                   "--rope-dim must be an even number >= 2, "
                                   "not '%s'",
                                   v);
    } else if (strcmp(opt, "--rope-offset") == 0) {
        if (cli_parse_i64(v, &a->rope_offset) || a->rope_offset < 0 ||
            a->rope_offset > ((int64_t)1 << 40))
            return cli_usage_error(cmd,
                                   "--rope-offset must be an integer in "
                                   "[0, 2^40], not '%s'",
                                   v);
    } else { /* --rope-scaling linear:F or llama3:F,LOW,HIGH,ORIG */
        char buf[256];
        char *parts[5];
        const char *colon = strchr(v, ':');
        int n =
            colon ? cli_split_commas(colon + 1, buf, sizeof buf, parts, 4) : 0;
        double x[4] = {0, 0, 0, 0};
        int bad = n < 1;
        for (int i = 0; i < n && i < 4; i++)
            bad |= cli_parse_double(parts[i], &x[i]) != 0 || !isfinite(x[i]);
        if (!bad && strncmp(v, "linear:", 7) == 0 && n == 1 && x[0] >= 1) {
            r->scaling = ATTN_ROPE_SCALING_LINEAR;
            r->factor = x[0];
        } else if (!bad && strncmp(v, "llama3:", 7) == 0 && n == 4 &&
                   x[0] >= 1 && x[1] > 0 && x[2] > x[1] && x[3] > 0) {
            r->scaling = ATTN_ROPE_SCALING_LLAMA3;
            r->factor = x[0];
            r->low_freq_factor = x[1];
            r->high_freq_factor = x[2];
            r->original_max_position = x[3];
        } else {
            return cli_usage_error(cmd,
                                   "--rope-scaling takes linear:FACTOR or "
                                   "llama3:FACTOR,LOW,HIGH,ORIG (FACTOR >= 1, "
                                   "0 < LOW < HIGH, ORIG > 0), not '%s'",
                                   cli_esc(v));
        }
    }
    return 0;
}

/* --rope-* without --rope is an error; an offset becomes positions. */
int cli_rope_bind(const char *cmd, cli_sdpa_args *a, int64_t Lq, int64_t Lk) {
    attn_rope def;
    attn_rope_init(&def);
    if (!a->rope_set) {
        if (memcmp(&def, &a->rope, sizeof def) != 0 || a->rope_offset)
            return cli_usage_error(cmd, "--rope-theta, --rope-dim, "
                                        "--rope-scaling and --rope-offset "
                                        "need --rope neox|interleaved");
        return 0;
    }
    a->opts.rope = &a->rope;
    if (!a->rope_offset) return 0;
    free(a->rope_pos);
    a->rope_pos = malloc(sizeof(int64_t) * (size_t)(Lq + Lk));
    if (!a->rope_pos) {
        fprintf(stderr, "attn %s: out of memory for the rope positions\n", cmd);
        return 1;
    }
    int br = a->opts.mask.align == ATTN_ALIGN_BOTTOM_RIGHT;
    for (int64_t i = 0; i < Lq; i++) {
        int64_t c = br ? i + Lk - Lq : i;
        a->rope_pos[i] = a->rope_offset + (c < 0 ? 0 : c);
    }
    for (int64_t j = 0; j < Lk; j++) a->rope_pos[Lq + j] = a->rope_offset + j;
    a->opts.rope_q_positions = a->rope_pos;
    a->opts.n_rope_q_positions = Lq;
    a->opts.rope_k_positions = a->rope_pos + Lq;
    a->opts.n_rope_k_positions = Lk;
    return 0;
}

/* Pieces shared by the layer subcommands (attn mha, additive, encoder):
 * loading a sequence input, the parameter-source options, saving. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

int cli_load_seq(const char *cmd, const char *path, const char *name,
                 cli_seq *s) {
    memset(s, 0, sizeof *s);
    int rc = cli_load_tensor(cmd, path, name, &s->t);
    if (rc) return rc;
    if (s->t.rank == 4) {
        cli_tensor_free(&s->t);
        return cli_usage_error(cmd, "--%s must have rank 2 (L, D) or 3 "
                               "(B, L, D); %s has rank 4", name, path);
    }
    if ((rc = cli_tensor_convert(cmd, &s->t, ATTN_F32))) {
        cli_tensor_free(&s->t);
        return rc;
    }
    s->B = s->t.t.shape[0];
    s->L = s->t.t.shape[2];
    s->D = s->t.t.shape[3];
    s->x = s->t.t.data;
    return 0;
}

void cli_seq_free(cli_seq *s) { cli_tensor_free(&s->t); }

int cli_save_seq(const char *cmd, const char *path, float *data, int rank,
                 int nlead, const int64_t *lead, int64_t B, int64_t rows,
                 int64_t cols) {
    /* shape: [lead...] (B if rank 3) [rows] cols */
    int64_t shape[8];
    int nd = 0;
    for (int i = 0; i < nlead; i++) shape[nd++] = lead[i];
    if (rank == 3) shape[nd++] = B;
    shape[nd++] = rows;
    shape[nd++] = cols;
    return cli_save_array(cmd, path, ATTN_F32, data, nd, shape);
}

int cli_param_opt(const char *arg, const char *val, cli_param_src *p,
                  int *used) {
    *used = 1;
    if (strcmp(arg, "--params") == 0) p->load = val;
    else if (strcmp(arg, "--save-params") == 0) p->save = val;
    else if (strcmp(arg, "--init-seed") == 0) {
        if (cli_parse_u64(val, &p->seed)) return 1;
        p->seeded = 1;
    } else *used = 0;
    return 0;
}

int cli_param_check(const char *cmd, const cli_param_src *p) {
    if (!p->load == !p->seeded)
        return cli_usage_error(cmd, "give either --params FILE or "
                               "--init-seed N");
    return 0;
}

void cli_param_help(FILE *f) {
    fprintf(f,
"parameters (one of):\n"
"  --params FILE        a parameter file (docs/params-format.md); the\n"
"                       layer's sizes come from it\n"
"  --init-seed N        Xavier-uniform initialization from seed N (biases\n"
"                       0, LayerNorm gamma 1), sizes from the options\n"
"  --save-params FILE   also write the parameters used to FILE\n");
}

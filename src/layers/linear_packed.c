/* Linear maps on weights packed once (a loaded model's, which never
 * change): y = x W^T + b through oneDNN's matmul primitive, whose weights
 * are reordered once into the primitive's own blocked layout. On the
 * MiniLM shapes (4096 x 384 -> 384 / 1536, 4096 x 1536 -> 384, 2 threads)
 * it ran at 1.3-1.6x OpenBLAS's sgemm cut into the same row blocks, which
 * packs the weights again for each block.
 *
 * Bits: every product is cut into blocks of ROWS rows, a cut that
 * depends on n only; every block (the last one padded with zero rows to
 * ROWS) runs the same primitive on one thread (planned and executed with
 * one OpenMP thread), so each row's sums are the same chains whatever the
 * thread count. The blocks are dealt out dynamically to the team.
 *
 * The switch is per calling thread (attn__linear_packed_scope): a model's
 * forward sets its set of packed weights around its layers, and
 * attn_linear_forward takes the packed path for a weight found in it.
 * Without oneDNN (ATTN_HAVE_DNNL unset), or under ATTN_SGEMM=openblas,
 * nothing is packed; the other maps run the grid of attn__sgemm blocks
 * (common.c). */
#include "layers.h"

#include <cblas.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

static _Thread_local const attn__packed_set *packed_on;

const attn__packed_set *attn__linear_packed_scope(const attn__packed_set *s) {
    const attn__packed_set *was = packed_on;
    packed_on = s;
    return was;
}

#ifdef ATTN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

/* Rows per block: 64 to 512 ran within noise of each other on the MiniLM
 * shapes; 128 keeps a block's rows of the widest input (1536) in L2 and
 * wastes little on a padded last block. */
#define ROWS 128

typedef struct {
    const float *w; /* the weight it packs (out x in), the lookup key */
    int64_t in, out;
    float *packed; /* the primitive's layout                        */
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a, wd, b, c;
    size_t scratch; /* bytes */
} packed_weight;

struct attn__packed_set {
    dnnl_engine_t eng;
    int n;
    packed_weight *pw;
};

static int omp_one_begin(void) {
#ifdef _OPENMP
    const int was = omp_get_max_threads();
    omp_set_num_threads(1);
    return was;
#else
    return 1;
#endif
}

static void omp_one_end(int was) {
#ifdef _OPENMP
    omp_set_num_threads(was);
#else
    (void)was;
#endif
}

/* The primitive for ROWS x in -> out with bias, planned for one thread,
 * and W reordered into the layout it asks for. 0 on success. */
static int pack_one(dnnl_engine_t eng, packed_weight *p) {
    const dnnl_dims_t ad = {ROWS, p->in}, wdims = {p->in, p->out},
                      cd = {ROWS, p->out}, bd = {1, p->out},
                      wst = {1, p->in}; /* W^T viewed in place */
    dnnl_memory_desc_t wany, wsrc;
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t at = NULL;
    dnnl_primitive_desc_t pd = NULL, rpd = NULL;
    dnnl_primitive_t rp = NULL;
    dnnl_memory_t ms = NULL, mdst = NULL;
    dnnl_stream_t s = NULL;
    int bad =
        dnnl_memory_desc_init_by_tag(&p->a, 2, ad, dnnl_f32, dnnl_ab) ||
        dnnl_memory_desc_init_by_tag(&wany, 2, wdims, dnnl_f32,
                                     dnnl_format_tag_any) ||
        dnnl_memory_desc_init_by_tag(&p->c, 2, cd, dnnl_f32, dnnl_ab) ||
        dnnl_memory_desc_init_by_tag(&p->b, 2, bd, dnnl_f32, dnnl_ab) ||
        dnnl_memory_desc_init_by_strides(&wsrc, 2, wdims, dnnl_f32, wst) ||
        dnnl_matmul_desc_init(&md, &p->a, &wany, &p->b, &p->c) ||
        dnnl_primitive_attr_create(&at) ||
        dnnl_primitive_attr_set_scratchpad_mode(at,
                                                dnnl_scratchpad_mode_user) ||
        dnnl_primitive_desc_create(&pd, &md, at, eng, NULL);
    if (!bad) {
        p->wd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        p->scratch = dnnl_memory_desc_get_size(
            dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
        const size_t wbytes = dnnl_memory_desc_get_size(&p->wd);
        bad = !(p->packed = attn__alloc(wbytes / sizeof(float) + 16,
                                        sizeof(float), "packed weights")) ||
              dnnl_primitive_create(&p->prim, pd) ||
              dnnl_reorder_primitive_desc_create(&rpd, &wsrc, eng, &p->wd, eng,
                                                 NULL) ||
              dnnl_primitive_create(&rp, rpd) ||
              dnnl_memory_create(&ms, &wsrc, eng, (void *)p->w) ||
              dnnl_memory_create(&mdst, &p->wd, eng, p->packed) ||
              dnnl_stream_create(&s, eng, dnnl_stream_default_flags);
    }
    if (!bad) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, mdst}};
        bad = dnnl_primitive_execute(rp, s, 2, args) || dnnl_stream_wait(s);
    }
    if (s) dnnl_stream_destroy(s);
    if (ms) dnnl_memory_destroy(ms);
    if (mdst) dnnl_memory_destroy(mdst);
    if (rp) dnnl_primitive_destroy(rp);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (at) dnnl_primitive_attr_destroy(at);
    return bad;
}

attn__packed_set *attn__packed_build(int count, const float *const *w,
                                     const int64_t *in, const int64_t *out) {
    /* ATTN_SGEMM=openblas: nothing packed; else ATTN_ISA's cap is set */
    if (!attn__sgemm_onednn()) return NULL;
    attn__packed_set *s = attn__alloc(1, sizeof *s, "packed weights");
    if (!s) return NULL;
    memset(s, 0, sizeof *s);
    if (!(s->pw =
              attn__alloc((size_t)count, sizeof *s->pw, "packed weights"))) {
        attn__free(s);
        return NULL;
    }
    memset(s->pw, 0, (size_t)count * sizeof *s->pw);
    const int omp = omp_one_begin(); /* plans for one thread */
    int bad = dnnl_engine_create(&s->eng, dnnl_cpu, 0) != dnnl_success;
    for (int i = 0; i < count && !bad; i++) {
        packed_weight *p = &s->pw[i];
        p->w = w[i];
        p->in = in[i];
        p->out = out[i];
        s->n = i + 1;
        bad = pack_one(s->eng, p);
    }
    omp_one_end(omp);
    if (bad) {
        attn__packed_free(s);
        return NULL;
    }
    return s;
}

void attn__packed_free(attn__packed_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        if (s->pw[i].prim) dnnl_primitive_destroy(s->pw[i].prim);
        attn__free(s->pw[i].packed);
    }
    if (s->eng) dnnl_engine_destroy(s->eng);
    ATTN__FREE_ALL(s->pw, s);
}

static const packed_weight *find(const attn__packed_set *s, const float *w,
                                 int64_t in, int64_t out) {
    for (int i = 0; s && i < s->n; i++)
        if (s->pw[i].w == w && s->pw[i].in == in && s->pw[i].out == out)
            return &s->pw[i];
    return NULL;
}

/* The bf16 switch (linear_bf16.c) wins: its products are what was asked. */
static const attn__packed_set *current(void) {
    return attn__linear_bf16_active() ? NULL : packed_on;
}

int attn__linear_packed_has(const float *w, int64_t in, int64_t out) {
    return find(current(), w, in, out) != NULL;
}

/* One block of ROWS rows: x (ROWS, in) to y (ROWS, out). 0 on success. */
static int run_block(const attn__packed_set *s, const packed_weight *p,
                     dnnl_stream_t strm, void *scratch, const float *x,
                     const float *b, float *y) {
    const dnnl_dims_t sdims = {(dnnl_dim_t)(p->scratch ? p->scratch : 1)};
    dnnl_memory_desc_t sd;
    dnnl_memory_t m[5] = {NULL, NULL, NULL, NULL, NULL};
    int bad = dnnl_memory_desc_init_by_tag(&sd, 1, sdims, dnnl_u8, dnnl_a) ||
              dnnl_memory_create(&m[0], &p->a, s->eng, (void *)x) ||
              dnnl_memory_create(&m[1], &p->wd, s->eng, p->packed) ||
              dnnl_memory_create(&m[2], &p->b, s->eng, (void *)b) ||
              dnnl_memory_create(&m[3], &p->c, s->eng, y) ||
              dnnl_memory_create(&m[4], &sd, s->eng, scratch);
    if (!bad) {
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, m[0]},
                                   {DNNL_ARG_WEIGHTS, m[1]},
                                   {DNNL_ARG_BIAS, m[2]},
                                   {DNNL_ARG_DST, m[3]},
                                   {DNNL_ARG_SCRATCHPAD, m[4]}};
        bad = dnnl_primitive_execute(p->prim, strm, 5, args) ||
              dnnl_stream_wait(strm);
    }
    for (int i = 0; i < 5; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    return bad;
}

/* Rows r0 .. r0 + rows - 1 (rows <= ROWS): in place when a whole block,
 * else through zero-padded copies in pad (ROWS (in + out) floats). */
static int block_rows(const attn__packed_set *s, const packed_weight *p,
                      dnnl_stream_t strm, void *scratch, float *pad,
                      int64_t rows, const float *x, const float *b, float *y) {
    if (rows == ROWS) return run_block(s, p, strm, scratch, x, b, y);
    float *px = pad, *py = pad + ROWS * p->in;
    memcpy(px, x, (size_t)(rows * p->in) * sizeof(float));
    memset(px + rows * p->in, 0,
           (size_t)((ROWS - rows) * p->in) * sizeof(float));
    const int bad = run_block(s, p, strm, scratch, px, b, py);
    if (!bad) memcpy(y, py, (size_t)(rows * p->out) * sizeof(float));
    return bad;
}

int attn__linear_packed_forward(int64_t n, int64_t in, int64_t out,
                                const float *x, const float *w, const float *b,
                                float *y, attn_activation act, float *yact) {
    const attn__packed_set *s = current();
    const packed_weight *p = find(s, w, in, out);
    if (!p || !b || n < ROWS) return 0;
    const int team = openblas_get_num_threads();
    const int64_t blocks = (n + ROWS - 1) / ROWS;
    int bad = 0;
#pragma omp parallel num_threads(team > 1 ? team : 1) reduction(| : bad)
    {
#ifdef _OPENMP
        omp_set_num_threads(1); /* this thread's primitive calls: no team */
#endif
        dnnl_stream_t strm = NULL;
        void *scratch = attn__alloc(p->scratch + 64, 1, "oneDNN scratchpad");
        float *pad = NULL;
        bad = !scratch ||
              dnnl_stream_create(&strm, s->eng, dnnl_stream_default_flags);
#pragma omp for schedule(dynamic, 1)
        for (int64_t blk = 0; blk < blocks; blk++) {
            const int64_t r0 = blk * ROWS, rows = n - r0 < ROWS ? n - r0 : ROWS;
            if (bad) continue;
            if (rows < ROWS && !pad &&
                !(pad = attn__alloc((size_t)(ROWS * (in + out)), sizeof(float),
                                    "padded rows"))) {
                bad = 1;
                continue;
            }
            bad = block_rows(s, p, strm, scratch, pad, rows, x + r0 * in, b,
                             y + r0 * out);
            if (!bad && yact)
                attn__act_forward(act, y + r0 * out, yact + r0 * out,
                                  rows * out, 1);
        }
        if (strm) dnnl_stream_destroy(strm);
        attn__free(pad);
        attn__free(scratch);
    }
    return bad ? -1 : 1;
}

#else /* no oneDNN: nothing is packed */

attn__packed_set *attn__packed_build(int count, const float *const *w,
                                     const int64_t *in, const int64_t *out) {
    (void)count;
    (void)w;
    (void)in;
    (void)out;
    return NULL;
}

void attn__packed_free(attn__packed_set *s) { (void)s; }

int attn__linear_packed_has(const float *w, int64_t in, int64_t out) {
    (void)w;
    (void)in;
    (void)out;
    return 0;
}

int attn__linear_packed_forward(int64_t n, int64_t in, int64_t out,
                                const float *x, const float *w, const float *b,
                                float *y, attn_activation act, float *yact) {
    (void)n;
    (void)in;
    (void)out;
    (void)x;
    (void)w;
    (void)b;
    (void)y;
    (void)act;
    (void)yact;
    return 0;
}

#endif

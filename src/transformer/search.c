/* The decoding loops of generation over the state of generate.c: greedy
 * and sampling (temperature, top-k, top-p; one random stream per
 * sequence) and beam search (candidates ranked by score, then beam, then
 * id, so ties break the same way as greedy's first maximum; finished
 * hypotheses kept only when ranked within the width; the caches reordered
 * by parent beam after each step). Also the exact-match evaluation. */
#include "transformer.h"

#include <math.h>
#include <string.h>

void attn_generate_opts_init(attn_generate_opts *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->beam = 1;
    o->temperature = 1.0;
    o->top_p = 1.0;
    o->bos_id = ATTN_GEN_BOS;
    o->eos_id = ATTN_GEN_EOS;
}

static attn_status check_opts(const attn_generate_opts *o, int64_t V) {
    if (o->beam < 1 || o->beam > 4096 || (o->sample != 0 && o->sample != 1))
        return attn__fail(ATTN_E_INVALID,
                          "beam %lld must be in [1, 4096] and "
                          "sample (%d) 0 or 1",
                          (long long)o->beam, o->sample);
    if (o->sample && o->beam > 1)
        return attn__fail(ATTN_E_INVALID, "sampling needs beam 1, not %lld",
                          (long long)o->beam);
    if (!(o->temperature > 0) || isinf(o->temperature) || o->top_k < 0 ||
        !(o->top_p > 0 && o->top_p <= 1) || !isfinite(o->length_penalty))
        return attn__fail(ATTN_E_INVALID,
                          "temperature %g must be > 0, top_k "
                          "%lld >= 0, top_p %g in (0, 1], length_penalty %g "
                          "finite",
                          o->temperature, (long long)o->top_k, o->top_p,
                          o->length_penalty);
    if (o->threads < 0 || o->max_len < 0 ||
        (o->recompute != 0 && o->recompute != 1))
        return attn__fail(ATTN_E_INVALID,
                          "threads %d and max_len %lld must be "
                          ">= 0, recompute 0 or 1",
                          o->threads, (long long)o->max_len);
    if (o->bos_id < 0 || o->bos_id >= V || o->eos_id < 0 || o->eos_id >= V)
        return attn__fail(ATTN_E_INVALID,
                          "bos_id %d and eos_id %d must be ids "
                          "of the model (0..%lld)",
                          o->bos_id, o->eos_id, (long long)V - 1);
    if (o->step_logits && o->beam > 1)
        return attn__fail(ATTN_E_INVALID, "step_logits needs beam 1");
    return ATTN_OK;
}

static double row_lse(const float *z, int64_t V) {
    double mx = z[0], s = 0;
    for (int64_t v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    for (int64_t v = 0; v < V; v++) s += exp((double)z[v] - mx);
    /* cppcheck-suppress invalidFunctionArg ; s >= 1 (the term of the max) */
    return mx + log(s);
}

typedef struct {
    double s;
    int64_t k;
    int32_t v;
} cand;

/* Descending score, then ascending beam and id. */
static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (a->s != b->s) return a->s > b->s ? -1 : 1;
    if (a->k != b->k) return a->k < b->k ? -1 : 1;
    return (a->v > b->v) - (a->v < b->v);
}

/* One id from the row's logits: argmax, or a draw under temperature,
 * top-k and top-p. *logp: the model's log-probability of it. */
static int32_t pick(const float *z, int64_t V, const attn_generate_opts *o,
                    attn_rng *rng, cand *work, double *logp) {
    const double lse = row_lse(z, V);
    int64_t arg = 0;
    if (!o->sample) {
        for (int64_t v = 1; v < V; v++)
            if (z[v] > z[arg]) arg = v;
        *logp = (double)z[arg] - lse;
        return (int32_t)arg;
    }
    double mx = z[0];
    for (int64_t v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    double sum = 0;
    for (int64_t v = 0; v < V; v++) {
        work[v].s = exp(((double)z[v] - mx) / o->temperature);
        work[v].k = 0;
        work[v].v = (int32_t)v;
        sum += work[v].s;
    }
    qsort(work, (size_t)V, sizeof *work, cand_cmp);
    int64_t keep = o->top_k > 0 && o->top_k < V ? o->top_k : V;
    if (o->top_p < 1) {
        double cum = 0;
        for (int64_t i = 0; i < keep; i++) {
            cum += work[i].s / sum;
            if (cum >= o->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double mass = 0;
    for (int64_t i = 0; i < keep; i++) mass += work[i].s;
    const double u = (double)(attn_rng_next(rng) >> 11) * 0x1p-53 * mass;
    double cum = 0;
    arg = work[keep - 1].v;
    for (int64_t i = 0; i < keep; i++) {
        cum += work[i].s;
        if (u < cum) {
            arg = work[i].v;
            break;
        }
    }
    *logp = (double)z[arg] - lse;
    return (int32_t)arg;
}

/* What row r feeds at step t. */
typedef struct {
    const int32_t *src;
    const int64_t *plen; /* prompt lengths (DECODER) or NULL            */
    int64_t Ls;
    int32_t bos;
} feeder;

static int32_t feed_of(const feeder *f, int64_t b, int64_t t, int32_t last) {
    if (f->plen && t < f->plen[b]) return f->src[b * f->Ls + t];
    return f->plen || t > 0 ? last : f->bos;
}

static attn_status greedy(attn__gen *g, const feeder *f, int64_t B,
                          const int64_t *first, int64_t steps, int64_t maxn,
                          const attn_generate_opts *o, int32_t *out,
                          int64_t out_cap, int64_t *out_len, double *scores) {
    const int64_t V = g->V;
    attn_status st = ATTN_E_NOMEM;
    int32_t *feed = attn__alloc((size_t)(2 * B), sizeof(int32_t), "feed");
    attn_rng *rng = attn__alloc((size_t)B, sizeof *rng, "sampling streams");
    cand *work = attn__alloc((size_t)V, sizeof *work, "sampling buffer");
    unsigned char *done = attn__alloc((size_t)B, 1, "done flags");
    if (!feed || !rng || !work || !done) goto out;
    int32_t *last = feed + B;
    for (int64_t b = 0; b < B; b++) {
        attn_rng_seed(&rng[b], attn__train_seed(o->seed, 4, (uint64_t)b));
        out_len[b] = 0;
        if (scores) scores[b] = 0;
        last[b] = o->eos_id;
        done[b] = 0;
    }
    st = ATTN_OK;
    for (int64_t t = 0; t < steps; t++) {
        for (int64_t b = 0; b < B; b++) feed[b] = feed_of(f, b, t, last[b]);
        if ((st = attn__gen_step(g, feed))) break;
        int all = 1;
        for (int64_t b = 0; b < B; b++) {
            if (done[b] || t < first[b]) {
                all &= done[b];
                continue;
            }
            const float *z = g->logits + b * V;
            if (o->step_logits)
                memcpy(o->step_logits + (b * maxn + out_len[b]) * V, z,
                       sizeof(float) * (size_t)V);
            double lp;
            const int32_t tok = pick(z, V, o, &rng[b], work, &lp);
            if (scores) scores[b] += lp;
            last[b] = tok;
            if (tok == o->eos_id)
                done[b] = 1;
            else
                out[b * out_cap + out_len[b]++] = tok;
            if (out_len[b] == maxn) done[b] = 1;
            all &= done[b];
        }
        if (all) break;
    }
out:
    attn__free(feed);
    attn__free(rng);
    attn__free(work);
    attn__free(done);
    return st;
}

/* Beam search bookkeeping of one call. */
typedef struct {
    int64_t B, K, maxn;
    double alpha;
    double *score; /* [R] running log-probabilities        */
    unsigned char *alive, *done;
    int32_t *tok, *tmp;    /* (R, maxn) tokens of each beam        */
    int64_t *len, *parent; /* [R]                                  */
    int32_t *last;         /* [R]                                  */
    int32_t *ftok;         /* (B, K, maxn) finished hypotheses     */
    int64_t *flen, *nfin;
    double *fscore;
    cand *c; /* K * V                                 */
} beams;

static double penalty(double alpha, int64_t n) {
    return alpha == 0 ? 1.0 : pow((5.0 + (double)n) / 6.0, alpha);
}

/* Keeps the best K finished hypotheses of source b. */
static void finish(beams *s, int64_t b, const int32_t *toks, int64_t n,
                   int64_t counted, double logp) {
    const double sc = logp / penalty(s->alpha, counted);
    int64_t at = s->nfin[b];
    if (at == s->K) {
        at = 0;
        for (int64_t i = 1; i < s->K; i++)
            if (s->fscore[b * s->K + i] < s->fscore[b * s->K + at]) at = i;
        if (!(sc > s->fscore[b * s->K + at])) return;
    } else {
        s->nfin[b]++;
    }
    memcpy(s->ftok + (b * s->K + at) * s->maxn, toks,
           sizeof(int32_t) * (size_t)n);
    s->flen[b * s->K + at] = n;
    s->fscore[b * s->K + at] = sc;
}

/* One step of source b: candidates, finished hypotheses, new beams. */
static void beam_source(beams *s, const attn__gen *g, int64_t b, int32_t eos) {
    const int64_t K = s->K, V = g->V, r0 = b * K;
    int64_t nc = 0;
    for (int64_t k = 0; k < K; k++) {
        if (!s->alive[r0 + k]) continue;
        const float *z = g->logits + (r0 + k) * V;
        const double lse = row_lse(z, V);
        for (int64_t v = 0; v < V; v++) {
            s->c[nc].s = s->score[r0 + k] + ((double)z[v] - lse);
            s->c[nc].k = k;
            s->c[nc].v = (int32_t)v;
            nc++;
        }
    }
    const int64_t j = s->len[r0]; /* tokens so far, the same for every beam */
    if (nc == 0) {
        s->done[b] = 1;
        return;
    }
    qsort(s->c, (size_t)nc, sizeof *s->c, cand_cmp);
    int64_t nb = 0;
    double nscore[64];
    int64_t npar[64];
    int32_t ntok[64];
    for (int64_t i = 0; i < nc && nb < K; i++) {
        const cand *c = &s->c[i];
        if (c->v == eos) {
            if (i < K)
                finish(s, b, s->tok + (r0 + c->k) * s->maxn, j, j + 1, c->s);
            continue;
        }
        nscore[nb] = c->s;
        npar[nb] = c->k;
        ntok[nb] = c->v;
        nb++;
    }
    for (int64_t i = 0; i < K; i++) {
        const int64_t r = r0 + i;
        if (i < nb) {
            s->parent[r] = r0 + npar[i];
            s->score[r] = nscore[i];
            s->alive[r] = 1;
            memcpy(s->tmp + r * s->maxn, s->tok + s->parent[r] * s->maxn,
                   sizeof(int32_t) * (size_t)j);
            s->tmp[r * s->maxn + j] = ntok[i];
            s->len[r] = j + 1;
            s->last[r] = ntok[i];
        } else {
            s->parent[r] = r0;
            s->score[r] = -INFINITY;
            s->alive[r] = 0;
            memcpy(s->tmp + r * s->maxn, s->tok + r0 * s->maxn,
                   sizeof(int32_t) * (size_t)j);
            s->tmp[r * s->maxn + j] = eos;
            s->len[r] = j + 1;
        }
    }
    for (int64_t i = 0; i < K; i++)
        memcpy(s->tok + (r0 + i) * s->maxn, s->tmp + (r0 + i) * s->maxn,
               sizeof(int32_t) * (size_t)(j + 1));
    if (j + 1 == s->maxn)
        for (int64_t i = 0; i < nb; i++)
            finish(s, b, s->tok + (r0 + i) * s->maxn, j + 1, j + 1, nscore[i]);
    /* done when no live beam can still beat the worst kept hypothesis: a
     * score only falls as tokens are added, and the penalty is monotone
     * in the length, so the bound below is exact */
    int done = j + 1 == s->maxn || nb == 0;
    if (!done && s->nfin[b] == K) {
        double worst = s->fscore[b * K];
        for (int64_t i = 1; i < K; i++)
            worst = fmin(worst, s->fscore[b * K + i]);
        const double best = nscore[0]; /* candidates are sorted */
        const double p1 = penalty(s->alpha, j + 2),
                     p2 = penalty(s->alpha, s->maxn);
        done = fmax(best / p1, best / p2) <= worst;
    }
    if (done) s->done[b] = 1;
}

static attn_status beam_search(attn__gen *g, const feeder *f, int64_t B,
                               const int64_t *first, int64_t steps,
                               int64_t maxn, const attn_generate_opts *o,
                               int32_t *out, int64_t out_cap, int64_t *out_len,
                               double *scores) {
    const int64_t K = o->beam, R = B * K, V = g->V;
    if (K > 64)
        return attn__fail(ATTN_E_INVALID, "beam %lld: at most 64",
                          (long long)K);
    beams s;
    memset(&s, 0, sizeof s);
    s.B = B;
    s.K = K;
    s.maxn = maxn;
    s.alpha = o->length_penalty;
    attn_status st = ATTN_E_NOMEM;
    const size_t rm = attn__size3(R, maxn, 1);
    int32_t *feed = attn__alloc((size_t)R, sizeof(int32_t), "feed");
    s.score = attn__alloc((size_t)(R + B * K), sizeof(double), "beam scores");
    s.alive = attn__alloc((size_t)(R + B), 1, "beam flags");
    s.tok = attn__alloc(3 * rm + (size_t)R, sizeof(int32_t), "beam tokens");
    s.len = attn__alloc((size_t)(2 * R + B * K + B), sizeof(int64_t),
                        "beam lengths");
    s.c = attn__alloc((size_t)(K * V), sizeof *s.c, "candidates");
    if (!feed || !s.score || !s.alive || !s.tok || !s.len || !s.c) goto out;
    s.fscore = s.score + R;
    s.done = s.alive + R;
    s.tmp = s.tok + rm;
    s.ftok = s.tmp + rm;
    s.last = s.ftok + rm;
    s.parent = s.len + R;
    s.flen = s.parent + R;
    s.nfin = s.flen + B * K;
    for (int64_t r = 0; r < R; r++) {
        s.score[r] = r % K == 0 ? 0.0 : -INFINITY; /* one live beam at first */
        s.alive[r] = r % K == 0;
        s.len[r] = 0;
        s.last[r] = o->eos_id;
    }
    memset(s.done, 0, (size_t)B);
    memset(s.nfin, 0, sizeof(int64_t) * (size_t)B);
    st = ATTN_OK;
    for (int64_t t = 0; t < steps; t++) {
        for (int64_t r = 0; r < R; r++)
            feed[r] = feed_of(f, r / K, t, s.last[r]);
        if ((st = attn__gen_step(g, feed))) break;
        int all = 1;
        for (int64_t r = 0; r < R; r++) s.parent[r] = r;
        for (int64_t b = 0; b < B; b++) {
            if (!s.done[b] && t >= first[b]) beam_source(&s, g, b, o->eos_id);
            all &= s.done[b];
        }
        if (all) break;
        if ((st = attn__gen_reorder(g, s.parent))) break;
    }
    for (int64_t b = 0; st == ATTN_OK && b < B; b++) {
        int64_t best = 0;
        for (int64_t i = 1; i < s.nfin[b]; i++)
            if (s.fscore[b * K + i] > s.fscore[b * K + best]) best = i;
        const int64_t n = s.nfin[b] ? s.flen[b * K + best] : 0;
        memcpy(out + b * out_cap, s.ftok + (b * K + best) * maxn,
               sizeof(int32_t) * (size_t)n);
        out_len[b] = n;
        if (scores) scores[b] = s.nfin[b] ? s.fscore[b * K + best] : -INFINITY;
    }
out:
    attn__free(feed);
    attn__free(s.score);
    attn__free(s.alive);
    attn__free(s.tok);
    attn__free(s.len);
    attn__free(s.c);
    return st;
}

attn_status attn_generate(const attn_transformer_config *cfg,
                          const float *params, int64_t B, int64_t Ls,
                          const int32_t *src, const int64_t *src_lengths,
                          const attn_generate_opts *opts, int32_t *out,
                          int64_t out_cap, int64_t *out_lengths,
                          double *scores) {
    return attn__generate(cfg, params, B, Ls, src, src_lengths, opts, out,
                          out_cap, out_lengths, scores, 0);
}

attn_status attn__generate(const attn_transformer_config *cfg,
                           const float *params, int64_t B, int64_t Ls,
                           const int32_t *src, const int64_t *src_lengths,
                           const attn_generate_opts *opts, int32_t *out,
                           int64_t out_cap, int64_t *out_lengths,
                           double *scores, int force_beam) {
    attn_status st = attn_transformer_check(cfg);
    if (st) return st;
    ATTN__NONNULL("params, src, opts, out, out_lengths", params, src, opts, out,
                  out_lengths);
    if ((st = check_opts(opts, cfg->vocab_tgt))) return st;
    if (B < 1 || Ls < 1 || B > (1 << 20))
        return attn__fail(ATTN_E_SHAPE, "B %lld and Ls %lld must be >= 1",
                          (long long)B, (long long)Ls);
    const int ed = cfg->kind == ATTN_MODEL_ENCDEC;
    const int64_t vocab = ed ? cfg->vocab_src : cfg->vocab_tgt;
    if ((st = attn__ids_check(src, B * Ls, vocab, "src")) ||
        (st = attn__lengths_check(src_lengths, B, Ls, "src_lengths", "")))
        return st;
    int64_t maxfirst = 0;
    int64_t *first = attn__alloc((size_t)B, sizeof(int64_t), "first steps");
    if (!first) return ATTN_E_NOMEM;
    for (int64_t b = 0; b < B; b++) {
        const int64_t n = src_lengths ? src_lengths[b] : Ls;
        first[b] = ed ? 0 : n - 1;
        maxfirst = first[b] > maxfirst ? first[b] : maxfirst;
    }
    if (ed && Ls > cfg->max_src) {
        attn__free(first);
        return attn__fail(ATTN_E_SHAPE,
                          "the source has %lld tokens; the model "
                          "takes at most %lld",
                          (long long)Ls, (long long)cfg->max_src);
    }
    const int64_t room = cfg->max_tgt - maxfirst;
    if (room < 1) {
        attn__free(first);
        return attn__fail(ATTN_E_SHAPE,
                          "a prompt of %lld tokens leaves no room "
                          "to generate: the model takes %lld positions",
                          (long long)maxfirst + 1, (long long)cfg->max_tgt);
    }
    const int64_t maxn =
        opts->max_len > 0 && opts->max_len < room ? opts->max_len : room;
    if (out_cap < maxn) {
        attn__free(first);
        return attn__fail(ATTN_E_SHAPE, "out_cap %lld is below max_len %lld",
                          (long long)out_cap, (long long)maxn);
    }
    attn_layer_opts lo;
    attn_sdpa_opts_init(&lo);
    lo.threads = opts->threads;
    const int blas = attn__layer_blas_begin(&lo);
    attn__gen *g = NULL;
    st = attn__gen_create(cfg, params, B, opts->beam, Ls, src, src_lengths,
                          maxfirst + maxn, opts->threads, opts->recompute, &g);
    if (!st) {
        feeder f = {src, ed ? NULL : src_lengths, Ls, opts->bos_id};
        int64_t *plen = NULL;
        if (!ed && !src_lengths) { /* prompts of length Ls */
            if (!(plen = attn__alloc((size_t)B, sizeof(int64_t), "lengths")))
                st = ATTN_E_NOMEM;
            for (int64_t b = 0; plen && b < B; b++) plen[b] = Ls;
            f.plen = plen;
        }
        if (!st)
            st = opts->beam > 1 || (force_beam && !opts->sample)
                     ? beam_search(g, &f, B, first, maxfirst + maxn, maxn, opts,
                                   out, out_cap, out_lengths, scores)
                     : greedy(g, &f, B, first, maxfirst + maxn, maxn, opts, out,
                              out_cap, out_lengths, scores);
        attn__free(plen);
    }
    attn__gen_free(g);
    attn__layer_end(blas);
    attn__free(first);
    return st;
}

attn_status attn_gen_evaluate(const attn_transformer_config *cfg,
                              const float *params, const attn_gen_task *task,
                              int64_t count, uint64_t seed,
                              const attn_generate_opts *opts,
                              attn_gen_eval_result *res) {
    attn_status st = attn_transformer_check(cfg);
    if (st) return st;
    int64_t Ls, Lt;
    if ((st = attn_gen_batch_dims(task, cfg->kind, &Ls, &Lt))) return st;
    if (!params || !res || count < 1)
        return attn__fail(ATTN_E_INVALID,
                          "params and res must not be NULL and "
                          "count (%lld) >= 1",
                          (long long)count);
    attn_transformer_config fit = *cfg;
    if ((st = attn_gen_model_fit(task, &fit))) return st;
    if (fit.vocab_src != cfg->vocab_src || fit.vocab_tgt != cfg->vocab_tgt ||
        fit.max_src != cfg->max_src || fit.max_tgt != cfg->max_tgt)
        return attn__fail(ATTN_E_INVALID,
                          "task %s does not fit the model "
                          "(vocabularies %lld/%lld, lengths %lld/%lld)",
                          attn_gen_task_name(task->kind),
                          (long long)cfg->vocab_src, (long long)cfg->vocab_tgt,
                          (long long)cfg->max_src, (long long)cfg->max_tgt);
    attn_generate_opts go;
    if (opts)
        go = *opts;
    else
        attn_generate_opts_init(&go);
    go.step_logits = NULL;
    const int64_t chunk = count < 250 ? count : 250, T = Lt;
    const size_t acap = 128;
    int32_t *src =
        attn__alloc((size_t)(chunk * (Ls + 3 * Lt)), sizeof(int32_t), "ids");
    int64_t *len = attn__alloc((size_t)(2 * chunk), sizeof(int64_t), "lengths");
    char *ans = attn__alloc((size_t)chunk * acap, 1, "answers");
    if (!src || !len || !ans) {
        st = ATTN_E_NOMEM;
        goto done;
    }
    int32_t *tin = src + chunk * Ls, *y = tin + chunk * Lt,
            *gen = y + chunk * Lt;
    int64_t *glen = len + chunk;
    attn_rng rng;
    attn_rng_seed(&rng, attn__train_seed(seed, ATTN__STREAM_EVAL, 1));
    memset(res, 0, sizeof *res);
    int64_t chars = 0, right = 0;
    const attn_gen_side side =
        cfg->kind == ATTN_MODEL_ENCDEC ? ATTN_SIDE_TARGET : ATTN_SIDE_JOINT;
    for (int64_t doneN = 0; doneN < count; doneN += chunk) {
        const int64_t B = count - doneN < chunk ? count - doneN : chunk;
        if ((st = attn_gen_batch(task, cfg->kind, &rng, B, src, len, tin, y,
                                 ans, acap)))
            break;
        if ((st = attn_generate(cfg, params, B, Ls, src, len, &go, gen, T, glen,
                                NULL)))
            break;
        for (int64_t b = 0; b < B; b++) {
            char text[128];
            attn_gen_decode(task, side, gen + b * T, glen[b], text,
                            sizeof text);
            const char *want = ans + b * acap;
            res->exact += strcmp(text, want) == 0;
            const size_t n = strlen(want), nt = strlen(text);
            for (size_t i = 0; i < n; i++)
                right += i < nt && text[i] == want[i];
            chars += (int64_t)n;
        }
        res->sequences += B;
    }
    if (!st) {
        res->exact_match = (double)res->exact / (double)res->sequences;
        res->chars_correct = chars ? (double)right / (double)chars : 1.0;
    }
done:
    attn__free(src);
    attn__free(len);
    attn__free(ans);
    return st;
}

/* The id choice of generation, for other generators (the pretrained
 * decoder-only models): work holds V entries of attn__gen_pick_work()
 * bytes. */
size_t attn__gen_pick_work(void) { return sizeof(cand); }

int32_t attn__gen_pick(const float *z, int64_t V, const attn_generate_opts *o,
                       attn_rng *rng, void *work, double *logp) {
    return pick(z, V, o, rng, work, logp);
}

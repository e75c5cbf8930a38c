/* The rows of opts_desc.h: one per attention option, in the order the
 * command's --help lists them. A field added to attn_mask or
 * attn_sdpa_opts needs a row here (test_opts_desc fails until it has one),
 * and the row tells the command and Python what to take. */
#include "opts_desc.h"

#define F(member)                                                              \
    { offsetof(attn_sdpa_opts, member), sizeof(((attn_sdpa_opts *)0)->member) }

static const attn__opt_desc rows[] = {
    {"scale", "float > 0 (0: 1/sqrt(Dk))", "--scale S", "scale", NULL,
     ATTN__OPT_SCALE, "multiplier of q.k (> 0); default 1/sqrt(Dk)",
     {F(scale)}},
    {"causal", "top-left|bottom-right", "--causal ALIGN", "is_causal", NULL,
     ATTN__OPT_MASK,
     "look-ahead mask; ALIGN is top-left (query i sees keys\n"
     "0..i, PyTorch is_causal) or bottom-right (the last\n"
     "query sees the last key, FlashAttention / KV cache)",
     {F(mask.causal)}},
    {"align", "top-left|bottom-right", "--align ALIGN", "causal_alignment",
     NULL, ATTN__OPT_MASK,
     "alignment of --window without --causal (top-left)", {F(mask.align)}},
    {"window", "LEFT,RIGHT (each >= 0, or -1: unbounded)",
     "--window LEFT,RIGHT", "window", NULL, ATTN__OPT_MASK,
     "local window: query i sees keys c-LEFT .. c+RIGHT\n"
     "around its diagonal c; -1 leaves a side unbounded",
     {F(mask.window_left), F(mask.window_right)}},
    {"key_lengths", "B integers", "--key-lengths KL.npy", "key_lengths", NULL,
     ATTN__OPT_MASK, "valid keys per batch entry, B ints (or whole floats)",
     {F(mask.key_lengths)}},
    {"query_lengths", "B integers", "--query-lengths QL.npy", "query_lengths",
     NULL, ATTN__OPT_MASK, "valid queries per batch entry; rows past it are 0",
     {F(mask.query_lengths)}},
    {"keep", "mask tensor (bool, integer)", "--mask M.npy", "attn_mask", NULL,
     ATTN__OPT_MASK,
     "mask, rank 2 (Lq, Lk), 3 (B, Lq, Lk) or\n"
     "4 (B|1, H|1, Lq|1, Lk|1); axes of size 1 broadcast.\n"
     "As in PyTorch: bool or integer M says which keys\n"
     "to keep, float M is added to the scores (0 / -inf)",
     {F(mask.keep)}},
    {"mask_convention", "keep|masked|torch-mha", "--mask-convention C", NULL,
     "Python reads a bool attn_mask as PyTorch's SDPA does (True attends)",
     ATTN__OPT_MASK,
     "how a bool/integer M reads: keep (nonzero attends,\n"
     "PyTorch SDPA; the default), masked (1 = masked,\n"
     "Keras/TF) or torch-mha (True = blocked,\n"
     "nn.MultiheadAttention); given, a float M of 0/1\n"
     "is read this way too",
     {{0, 0}}},
    {"bias", "float tensor", "--bias BIAS.npy", "attn_mask", NULL,
     ATTN__OPT_MASK, "additive float bias, same ranks as --mask; -inf masks",
     {F(mask.bias)}},
    {"block_sparse", "BLOCK, 0/1 layout", "--block-sparse BLOCK,LAYOUT.npy",
     "block_sparse", NULL, ATTN__OPT_MASK,
     "block layout of 0/1, (ceil(Lq/BLOCK), ceil(Lk/BLOCK))\n"
     "shared by all heads, or (H, ...) per head",
     {F(mask.block_size), F(mask.layout), F(mask.layout_heads)}},
    {"random_blocks", "BLOCK,KEEP_P,SEED", "--random-blocks BLOCK,KEEP_P,SEED",
     "random_blocks", NULL, ATTN__OPT_MASK,
     "keep each BLOCK x BLOCK block with probability KEEP_P",
     {F(mask.random_block), F(mask.random_keep_p), F(mask.random_seed)}},
    {"softcap", "float > 0 (0: off)", "--softcap C", "softcap", NULL,
     ATTN__OPT_MASK,
     "soft-capping: scores become C tanh(s / C) after the\n"
     "scale, before mask and bias (Gemma 2); C > 0",
     {F(mask.softcap)}},
    {"alibi", "causal|symmetric", "--alibi causal|symmetric", "alibi_mode",
     NULL, ATTN__OPT_MASK,
     "ALiBi bias -slope_h (c - j) (causal, the paper's and\n"
     "BLOOM's) or -slope_h |c - j| (symmetric, MPT's), c the\n"
     "aligned query position; standard slopes 2^(-8(h+1)/H)",
     {F(mask.alibi)}},
    {"alibi_slopes", "H floats", "--alibi-slopes S.npy", "alibi_slopes", NULL,
     ATTN__OPT_MASK, "one ALiBi slope per head (H floats) instead",
     {F(mask.alibi_slopes), F(mask.n_alibi_slopes)}},
    {"sinks", "H floats", "--sinks S.npy", "sinks", NULL, ATTN__OPT_MASK,
     "attention sinks: one logit per head (H floats) in each\n"
     "softmax's denominator, with no value (gpt-oss)",
     {F(mask.sinks), F(mask.n_sinks), F(mask.sinks_grad)}},
    {"doc_ids", "non-decreasing integer ids per position",
     "--doc-ids Q.npy[,K.npy]", "doc_ids", NULL, ATTN__OPT_MASK,
     "packed documents: non-decreasing ids per position,\n"
     "(B, L) or (L,); query i sees key j only when their\n"
     "ids match (K.npy: key ids when Lq != Lk)",
     {F(mask.doc_q), F(mask.n_doc_q), F(mask.doc_k), F(mask.n_doc_k)}},
    {"cu_seqlens", "cumulative starts 0,n1,n1+n2,...,L", "--cu-seqlens CU",
     "cu_seqlens", NULL, ATTN__OPT_MASK,
     "packed documents as cumulative starts (FlashAttention\n"
     "varlen): CU.npy or a list 0,n1,n1+n2,...,L; document d\n"
     "holds positions CU[d] .. CU[d+1]-1 of every entry",
     {F(mask.doc_q), F(mask.n_doc_q)}},
    {"cu_seqlens_k", "cumulative starts of the keys", "--cu-seqlens-k CU",
     NULL, "Python's cu_seqlens takes the pair (queries', keys' starts)",
     ATTN__OPT_MASK,
     "the keys' starts when Lq != Lk (then --cu-seqlens\n"
     "gives the queries')",
     {F(mask.doc_k), F(mask.n_doc_k)}},
    {"score_mod", "function", NULL, "score_mod",
     "a function is no command-line value", ATTN__OPT_MASK,
     "a function of (b, h, i, j, score) that rewrites visible scores",
     {F(mask.score_mod), F(mask.score_ctx)}},
    {"mask_mod", "function", NULL, "mask_mod",
     "a function is no command-line value", ATTN__OPT_MASK,
     "a function of (b, h, i, j) that says which keys are visible",
     {F(mask.mask_mod), F(mask.mask_ctx)}},
    {"block_mask", "attn_block_mask", NULL, NULL,
     "built in C from a mask_mod (attn_block_mask_build) to skip its "
     "empty blocks; the command and Python run mask_mod without one",
     ATTN__OPT_MASK, "the tile classes of a mask_mod, made once",
     {F(mask.block_mask)}},
    {"impl", "auto|ref|flash", "--impl auto|ref|flash", "impl", NULL,
     ATTN__OPT_KERNEL, "kernel (ref: exact reference, double sums)",
     {F(impl)}},
    {"threads", "integer >= 0 (0: OpenMP's default)", "--threads N",
     "threads", NULL, ATTN__OPT_THREADS, "threads (0: OpenMP's default)",
     {F(threads)}},
    {"dropout_p", "float in [0, 1)", "--dropout P", "dropout_p", NULL,
     ATTN__OPT_KERNEL, "dropout on the weights, P in [0, 1)", {F(dropout_p)}},
    {"seed", "integer >= 0", "--seed N", "seed", NULL, ATTN__OPT_KERNEL,
     "dropout seed (default 0)", {F(seed)}},
};

const attn__opt_desc *attn__sdpa_opt_descs(int *n) {
    *n = (int)(sizeof rows / sizeof rows[0]);
    return rows;
}

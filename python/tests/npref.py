"""An independent NumPy implementation of attention in float64: the oracle of
the Python tests. It follows the written semantics (include/attn.h, the
PyTorch documentation), not libattn's code."""

import numpy as np

M32 = 0xFFFFFFFF


def philox4x32(seed, c0, c1, c2, c3):
    """Philox4x32-10 on arrays of 32-bit counters (held in uint64)."""
    k0 = np.uint64(seed & M32)
    k1 = np.uint64((seed >> 32) & M32)
    c = [np.asarray(x, dtype=np.uint64) for x in (c0, c1, c2, c3)]
    m = np.uint64(M32)
    s32 = np.uint64(32)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> s32) ^ c[1] ^ k0, p1 & m, (p0 >> s32) ^ c[3] ^ k1, p0 & m]
        k0 = (k0 + np.uint64(0x9E3779B9)) & m
        k1 = (k1 + np.uint64(0xBB67AE85)) & m
    return c


def dropout_keep(seed, p, B, H, Lq, Lk):
    """Keep decisions (B, H, Lq, Lk): the draw for (b, h, i, j) is word j % 4
    of Philox(seed; counter (j // 4, i, h, b)), kept when >= ceil(p 2^32)."""
    if p <= 0:
        return np.ones((B, H, Lq, Lk), dtype=bool)
    b, h, i, j = np.meshgrid(np.arange(B), np.arange(H), np.arange(Lq),
                             np.arange(Lk), indexing="ij")
    words = philox4x32(seed, j >> 2, i, h, b)
    draw = np.choose(j & 3, words)
    thr = min(int(np.ceil(p * 2.0 ** 32)), M32)
    return draw >= np.uint64(thr)


def to4(x, rank, heads3=False):
    """A rank-2/3/4 array as (B, H, L, D), the way the binding maps axes."""
    if rank == 4:
        return x
    if rank == 3:
        return x[None] if heads3 else x[:, None]
    return x[None, None]


def visible(B, H, Lq, Lk, is_causal=False, align="top-left", window=None,
            key_lengths=None, query_lengths=None):
    """(B, H, Lq, Lk) bool of the structural mask parts."""
    out = np.zeros((B, H, Lq, Lk), dtype=bool)
    i = np.arange(Lq)[:, None]
    j = np.arange(Lk)[None, :]
    for b in range(B):
        lq = Lq if query_lengths is None else int(np.ravel(query_lengths)[b])
        lk = Lk if key_lengths is None else int(np.ravel(key_lengths)[b])
        c = i + (lk - lq if align == "bottom-right" else 0)
        vis = (i < lq) & (j < lk)
        if is_causal:
            vis = vis & (j <= c)
        if window is not None:
            if window[0] is not None:
                vis = vis & (j >= c - window[0])
            if window[1] is not None:
                vis = vis & (j <= c + window[1])
        out[b] = vis
    return out


def sdpa(q, k, v, mask=None, dropout_p=0.0, is_causal=False, scale=None,
         align="top-left", window=None, key_lengths=None, query_lengths=None,
         seed=0):
    """Rank-4 float64 attention. mask: bool or float, already broadcastable
    to (B, H, Lq, Lk). Returns out, weights (after dropout), lse, and the
    pieces backward needs."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, H, Lq, E = q.shape
    Hk, Lk = k.shape[1], k.shape[2]
    if H != Hk:
        k = np.repeat(k, H // Hk, axis=1)
        v = np.repeat(v, H // Hk, axis=1)
    s = 1 / np.sqrt(E) if scale is None else scale
    S = s * (q @ np.swapaxes(k, -1, -2))
    vis = visible(B, H, Lq, Lk, is_causal, align, window, key_lengths,
                  query_lengths)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype == bool:
            vis = vis & np.broadcast_to(mask, vis.shape)
        else:
            bias = np.broadcast_to(mask.astype(np.float64), vis.shape)
            vis = vis & (bias > -np.inf)
            S = S + np.where(vis, bias, 0.0)
    S = np.where(vis, S, -np.inf)
    mx = S.max(axis=-1, keepdims=True)
    empty = ~vis.any(axis=-1, keepdims=True)
    mx = np.where(empty, 0.0, mx)
    e = np.where(vis, np.exp(S - mx), 0.0)
    l = e.sum(axis=-1, keepdims=True)
    P = np.where(empty, 0.0, e / np.where(empty, 1.0, l))
    lse = np.where(empty[..., 0], -np.inf, (mx + np.log(np.where(empty, 1.0, l)))[..., 0])
    keep = dropout_keep(seed, dropout_p, B, H, Lq, Lk)
    Z = keep / (1.0 - dropout_p)
    W = P * Z
    return W @ v, W, lse, dict(P=P, Z=Z, k=k, v=v, scale=s, H=H, Hk=Hk)


def sdpa_grads(q, k, v, dout, **kw):
    """dq, dk, dv and dS (the gradient of the biased scores) by the softmax
    formulas, in float64 on rank-4 arrays."""
    out, W, lse, c = sdpa(q, k, v, **kw)
    dout = np.asarray(dout, dtype=np.float64)
    P, Z, kk, vv, s = c["P"], c["Z"], c["k"], c["v"], c["scale"]
    dW = dout @ np.swapaxes(vv, -1, -2)          # (B, H, Lq, Lk)
    dP = dW * Z
    dS = P * (dP - (P * dP).sum(axis=-1, keepdims=True))
    dq = s * dS @ kk
    dk = s * np.swapaxes(dS, -1, -2) @ np.asarray(q, dtype=np.float64)
    dv = np.swapaxes(W, -1, -2) @ dout
    g = c["H"] // c["Hk"]
    if g > 1:  # heads of a group share k and v: their gradients sum
        B, H = dk.shape[:2]
        dk = dk.reshape(B, H // g, g, *dk.shape[2:]).sum(axis=2)
        dv = dv.reshape(B, H // g, g, *dv.shape[2:]).sum(axis=2)
    return dq, dk, dv, dS


def f32_to_bf16(x):
    """float32 -> bfloat16 bits (uint16), round to nearest even."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def bf16_to_f32(h):
    return (np.asarray(h, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


M64 = (1 << 64) - 1


def _mix64(x):
    """splitmix64's finalizer on uint64 arrays (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def random_block_kept(seed, keep_p, h, bi, bj):
    """Whether random block (h, bi, bj) is kept: u = the top 53 bits of
    mix(mix(mix(mix(seed ^ 0x5f3759df) ^ h) ^ bi) ^ bj) as a fraction in
    [0, 1), kept when u < keep_p (keep_p 0: none, 1: all). Broadcasts."""
    h, bi, bj = (np.asarray(a, dtype=np.int64).astype(np.uint64) for a in (h, bi, bj))
    if keep_p >= 1.0:
        return np.ones(np.broadcast(h, bi, bj).shape, dtype=bool)
    if keep_p <= 0.0:
        return np.zeros(np.broadcast(h, bi, bj).shape, dtype=bool)
    with np.errstate(over="ignore"):
        x = _mix64(np.full((), (seed ^ 0x5F3759DF) & M64, dtype=np.uint64))
        x = _mix64(x ^ h)
        x = _mix64(x ^ bi)
        x = _mix64(x ^ bj)
    u = (x >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    return u < keep_p


def block_keep(B, H, Lq, Lk, block_sparse=None, random_blocks=None):
    """(B, H, Lq, Lk) bool of the block parts of a mask: a block-sparse
    layout (block_size, layout (nbq, nbk) or (H or 1, nbq, nbk)) and seeded
    random blocks (block, keep_p, seed), both keyed by the query head h."""
    keep = np.ones((B, H, Lq, Lk), dtype=bool)
    i = np.arange(Lq)[:, None]
    j = np.arange(Lk)[None, :]
    if block_sparse is not None:
        bs, layout = block_sparse
        lay = np.asarray(layout).astype(bool)
        if lay.ndim == 2:
            lay = lay[None]
        for h in range(H):
            keep[:, h] &= lay[h if lay.shape[0] > 1 else 0][i // bs, j // bs]
    if random_blocks is not None:
        rb, p, seed = random_blocks
        for h in range(H):
            keep[:, h] &= random_block_kept(seed, p, h, i // rb, j // rb)
    return keep

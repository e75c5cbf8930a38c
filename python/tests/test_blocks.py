"""Block-sparse layouts and seeded random blocks (block_sparse=,
random_blocks=) against the NumPy oracle: forward, backward, the picture and
stats wrappers, the random-block hash itself, and bad layouts refused before
C reads them."""

import ctypes

import numpy as np
import pytest

import attn
import npref
from attn import _lib
from conftest import SANITIZED, make, tol_for
from test_backward import grad_tol, reduce_to
from test_sdpa import case_inputs, check_close, lse_tol
from test_viz import GREY

# The C hash, called directly, only to pin npref's copy of it.
_kept = _lib.lib.dll.attn_random_block_kept
_kept.restype = ctypes.c_int
_kept.argtypes = [ctypes.c_uint64, ctypes.c_double] + [ctypes.c_int64] * 3


@pytest.mark.parametrize("seed", [0, 1, 0x5F3759DF, 2**63 + 12345, 2**64 - 1])
@pytest.mark.parametrize("p", [0.0, 0.2, 0.5, 0.93, 1.0])
def test_random_block_hash_matches_c(seed, p):
    h, bi, bj = np.meshgrid(np.arange(3), np.arange(6), np.arange(9), indexing="ij")
    want = npref.random_block_kept(seed, p, h, bi, bj)
    got = np.vectorize(lambda a, b, c: _kept(seed, p, int(a), int(b), int(c)))(
        h, bi, bj).astype(bool)
    assert np.array_equal(got, want)
    if 0 < p < 1:  # the draw is not degenerate
        assert 0 < want.sum() < want.size or want.size < 20


def layout_for(rng, heads, nbq, nbk, dtype):
    lay = rng.random(((heads,) if heads else ()) + (nbq, nbk)) < 0.6
    return lay if dtype == "bool" else lay.astype(np.uint8) * rng.integers(1, 255)


def block_case(seed):
    r = np.random.default_rng(500 + seed)
    c = dict(rank=int(r.choice([2, 3, 4])), impl=str(r.choice(["auto", "ref", "flash"])),
             dtype=str(r.choice(["float32", "float16", "bfloat16"])))
    c["B"] = int(r.choice([1, 2])) if c["rank"] >= 3 else 1
    c["H"] = int(r.choice([1, 2, 4])) if c["rank"] == 4 else 1
    c["Hkv"] = c["H"] // 2 if c["H"] > 1 and r.random() < 0.4 else c["H"]
    sizes = (1, 3, 17, 40) if SANITIZED else (1, 3, 17, 40, 129)
    c["Lq"], c["Lk"] = (int(r.choice(sizes)) for _ in range(2))
    c["E"] = int(r.choice([4, 8]))
    c["block"] = int(r.choice([1, 2, 5, 16]))
    c["heads"] = int(r.choice([0, 1, c["H"]]))  # 0: a 2-D layout
    c["use_layout"] = bool(r.random() < 0.75)
    c["random"] = (int(r.choice([1, 3, 8])), float(r.choice([0.0, 0.4, 0.7, 1.0])),
                   int(r.integers(0, 2**64, dtype=np.uint64))) \
        if r.random() < 0.6 or not c["use_layout"] else None
    c["is_causal"] = bool(r.random() < 0.3)
    c["mask"] = str(r.choice(["none", "bool", "float"]))
    c["key_lengths"] = (r.integers(0, c["Lk"] + 1, c["B"]).tolist()
                        if c["rank"] >= 3 and r.random() < 0.3 else None)
    c["layout_dtype"] = str(r.choice(["bool", "uint8"]))
    return c


def oracle_mask(c, rank, score_shape, m, layout):
    """The user's mask ANDed with the block parts, as npref.sdpa takes it
    (rank 4, bool, or float with -inf where a block part hides)."""
    B4, H4 = npref.to4(np.zeros(score_shape), rank).shape[:2]
    keep = npref.block_keep(B4, H4, c["Lq"], c["Lk"],
                            (c["block"], layout) if layout is not None else None,
                            c["random"])
    if m is None:
        return keep
    m4 = npref.to4(np.broadcast_to(m, score_shape), rank)
    if m4.dtype == bool:
        return m4 & keep
    return np.where(keep, m4, -np.inf)


@pytest.mark.parametrize("seed", range(24 if SANITIZED else 60))
def test_forward_random_case(seed):
    c = block_case(seed)
    rng = np.random.default_rng(seed)
    r = c["rank"]
    (q, k, v), (q64, k64, v64), dt, score_shape = case_inputs(rng, c, 3)
    nbq, nbk = -(-c["Lq"] // c["block"]), -(-c["Lk"] // c["block"])
    layout = layout_for(rng, c["heads"], nbq, nbk, c["layout_dtype"]) \
        if c["use_layout"] else None
    m = None
    if c["mask"] == "bool":
        m = rng.random(score_shape[-2:]) < 0.8
    elif c["mask"] == "float":
        m = rng.standard_normal(score_shape[-2:]).astype(np.float32)
    out, w, lse = attn.scaled_dot_product_attention(
        q, k, v, attn_mask=m, is_causal=c["is_causal"], enable_gqa=c["H"] != c["Hkv"],
        key_lengths=c["key_lengths"], impl=c["impl"], dtype=dt,
        block_sparse=None if layout is None else (c["block"], layout),
        random_blocks=c["random"], return_weights=True, return_lse=True)
    want_o, want_w, want_l, _ = npref.sdpa(
        npref.to4(q64, r), npref.to4(k64, r), npref.to4(v64, r),
        mask=oracle_mask(c, r, score_shape, m, layout), is_causal=c["is_causal"],
        key_lengths=c["key_lengths"])
    check_close(out, want_o.reshape(out.shape), tol_for(v64), "out %r" % c)
    check_close(w, want_w.reshape(w.shape), 1e-5, "weights %r" % c)
    check_close(lse, want_l.reshape(lse.shape), lse_tol(want_l), "lse %r" % c)


@pytest.mark.parametrize("impl", ["auto", "flash", "ref"])
def test_many_tiles_with_empty_ones(rng, impl):
    """Lengths past the flash tiles (256), a layout that hides whole tiles
    and random blocks that cut across them: skipped and partial tiles."""
    Lq, Lk, bs = (130, 300, 32) if SANITIZED else (300, 520, 32)
    q, q64, _ = make(rng, (1, 2, Lq, 8))
    k, k64, _ = make(rng, (1, 2, Lk, 8))
    v, v64, _ = make(rng, (1, 2, Lk, 4))
    nbq, nbk = -(-Lq // bs), -(-Lk // bs)
    lay = np.zeros((2, nbq, nbk), dtype=bool)
    lay[0] = rng.random((nbq, nbk)) < 0.5
    lay[1, :, : nbk // 2] = True          # head 1: right half hidden
    lay[:, :, 0] = True
    rb = (24, 0.6, 77)
    out, w = attn.scaled_dot_product_attention(
        q, k, v, block_sparse=(bs, lay), random_blocks=rb, is_causal=True,
        causal_alignment="bottom-right", impl=impl, return_weights=True)
    keep = npref.block_keep(1, 2, Lq, Lk, (bs, lay), rb)
    want_o, want_w, _, _ = npref.sdpa(q64, k64, v64, mask=keep, is_causal=True,
                                      align="bottom-right")
    check_close(out, want_o, tol_for(v64), "out")
    check_close(w, want_w, 1e-5, "weights")
    assert np.all(w[keep == 0] == 0)


def test_layout_views_and_int_values(rng):
    """A transposed layout view is read by its values (copied to the C
    order), and any nonzero uint8 keeps."""
    q, q64, _ = make(rng, (2, 9, 4))
    k, k64, _ = make(rng, (2, 7, 4))
    v, v64, _ = make(rng, (2, 7, 4))
    base = (rng.random((4, 5)) < 0.5).astype(np.uint8) * 200
    lay = base.T                              # (5, 4) view: nbq 5, nbk 4
    out = attn.scaled_dot_product_attention(q, k, v, block_sparse=(2, lay))
    want = npref.sdpa(q64[:, None], k64[:, None], v64[:, None],
                      mask=npref.block_keep(2, 1, 9, 7, (2, lay != 0)))[0][:, 0]
    check_close(out, want, tol_for(v64), "out")


def test_random_blocks_pattern_per_head_and_seed(rng):
    """The pattern is keyed by the query head (GQA too) and the seed; the
    same for every batch entry; keep_p 0 hides everything (zeros)."""
    q, q64, _ = make(rng, (2, 4, 12, 4))
    k, k64, _ = make(rng, (2, 2, 10, 4))
    v, v64, _ = make(rng, (2, 2, 10, 3))
    for rb in ((2, 0.5, 1), (2, 0.5, 2), (3, 0.3, 2**64 - 1)):
        _, w = attn.scaled_dot_product_attention(
            q, k, v, enable_gqa=True, random_blocks=rb, return_weights=True)
        keep = npref.block_keep(2, 4, 12, 10, None, rb)
        want = npref.sdpa(q64, k64, v64, mask=keep)[1]
        check_close(w, want, 1e-5, "weights %r" % (rb,))
    w1 = attn.scaled_dot_product_attention(q, k, v, enable_gqa=True,
                                           random_blocks=(2, 0.5, 1),
                                           return_weights=True)[1]
    w2 = attn.scaled_dot_product_attention(q, k, v, enable_gqa=True,
                                           random_blocks=(2, 0.5, 2),
                                           return_weights=True)[1]
    assert not np.array_equal(w1 > 0, w2 > 0)
    out = attn.scaled_dot_product_attention(q, k, v, enable_gqa=True,
                                            random_blocks=(2, 0.0, 1))
    assert np.all(out == 0)


BACKWARD = [
    dict(layout=True),
    dict(random=(3, 0.6, 11)),
    dict(layout=True, random=(2, 0.7, 5), mask="float", is_causal=True),
    dict(layout=True, gqa=True, heads=True),
]


@pytest.mark.parametrize("impl", ["auto", "ref", "flash"])
@pytest.mark.parametrize("case", range(len(BACKWARD)))
def test_backward(rng, impl, case):
    c = BACKWARD[case]
    B, H, Lq, Lk, E, Ev, bs = 2, 4, 11, 9, 8, 3, 4
    Hkv = 2 if c.get("gqa") else H
    q, q64, _ = make(rng, (B, H, Lq, E))
    k, k64, _ = make(rng, (B, Hkv, Lk, E))
    v, v64, _ = make(rng, (B, Hkv, Lk, Ev))
    g, g64, _ = make(rng, (B, H, Lq, Ev))
    lay = None
    if c.get("layout"):
        lay = rng.random(((H,) if c.get("heads") else ()) + (3, 3)) < 0.6
        lay[..., 0] = True
    m = rng.standard_normal((Lq, Lk)).astype(np.float32) if c.get("mask") else None
    kw = dict(attn_mask=m, is_causal=c.get("is_causal", False),
              enable_gqa=Hkv != H, impl=impl, random_blocks=c.get("random"),
              block_sparse=None if lay is None else (bs, lay))
    grads = attn.sdpa_backward(g, q, k, v, **kw)
    keep = npref.block_keep(B, H, Lq, Lk, None if lay is None else (bs, lay),
                            c.get("random"))
    mask = keep if m is None else np.where(keep, m.astype(np.float64), -np.inf)
    dq, dk, dv, dS = npref.sdpa_grads(q64, k64, v64, g64, mask=mask,
                                      is_causal=kw["is_causal"])
    tol = grad_tol(q64, k64, v64, g64)
    check_close(grads[0], dq, tol, "dq")
    check_close(grads[1], dk, tol, "dk")
    check_close(grads[2], dv, tol, "dv")
    if m is not None:
        check_close(grads[3], reduce_to(dS, m.shape), tol, "dbias")
        assert len(grads) == 4
    # hidden blocks get no gradient through the scores
    assert np.abs(dS[~keep]).max(initial=0) == 0


def test_stats_and_heatmap_see_block_masks(rng, tmp_path):
    """Weights from dense attention leak onto blocks that a layout hides;
    stats counts that weight, the heatmap draws those cells grey."""
    q, q64, _ = make(rng, (2, 6, 4))
    k, k64, _ = make(rng, (2, 8, 4))
    w = npref.sdpa(q64[:, None], k64[:, None], k64[:, None])[1][:, 0]  # (2, 6, 8)
    lay = np.array([[True, False, True, True], [False, True, True, False],
                    [True, True, False, True]])
    rb = (3, 0.5, 4)
    # a rank-3 array is (batch, Lq, Lk): the random blocks vary by batch
    keep = npref.block_keep(2, 1, 6, 8, (2, lay), rb)[:, 0]
    s = attn.stats(w, block_sparse=(2, lay), random_blocks=rb, per_head=True)
    assert s["leak_count"] == int((~keep).sum())
    assert abs(s["leak_total"] - w[~keep].sum()) < 1e-9
    assert "mask_leak" in s["flags"]
    for h in range(2):
        assert s["per_head"][h]["leak_count"] == int((~keep[h]).sum())
    clean = attn.stats(np.where(keep, w, 0), block_sparse=(2, lay), random_blocks=rb)
    assert clean["leak_count"] == 0
    p = tmp_path / "blocks.svg"
    attn.heatmap(w, str(p), index=1, block_sparse=(2, lay), random_blocks=rb,
                 annotate=False)
    svg = p.read_text()
    assert svg.count(GREY) >= int((~keep[1]).sum())
    p2 = tmp_path / "plain.svg"
    attn.heatmap(w, str(p2), index=1, annotate=False)
    assert GREY not in p2.read_text()
    txt = attn.text_heatmap(w, index=1, block_sparse=(2, lay), random_blocks=rb,
                            half_blocks=False)
    assert "x" in txt


ERRORS = [
    (dict(block_sparse=(2,)), attn.ATTN_E_INVALID, "pair"),
    (dict(block_sparse=(0, np.ones((3, 3), bool))), attn.ATTN_E_INVALID, "block_size"),
    (dict(block_sparse=(-2, np.ones((3, 3), bool))), attn.ATTN_E_INVALID, "block_size"),
    (dict(block_sparse=(True, np.ones((5, 5), bool))), attn.ATTN_E_INVALID, "block_size"),
    (dict(block_sparse=(2.0, np.ones((3, 3), bool))), attn.ATTN_E_INVALID, "block_size"),
    (dict(block_sparse=(2, np.ones((3, 2), bool))), attn.ATTN_E_SHAPE, "(3, 3)"),
    (dict(block_sparse=(2, np.ones((2, 3), bool))), attn.ATTN_E_SHAPE, "(3, 3)"),
    (dict(block_sparse=(2, np.ones((4, 3), bool))), attn.ATTN_E_SHAPE, "needs"),
    (dict(block_sparse=(2, np.ones((3, 3, 3), bool))), attn.ATTN_E_SHAPE, "(2, 3, 3)"),
    (dict(block_sparse=(2, np.ones((1, 2, 3, 3), bool))), attn.ATTN_E_SHAPE, "needs"),
    (dict(block_sparse=(2, np.ones(9, bool))), attn.ATTN_E_SHAPE, "needs"),
    (dict(block_sparse=(2, np.ones((3, 3), np.int32))), attn.ATTN_E_DTYPE, "uint8"),
    (dict(block_sparse=(2, np.ones((3, 3), np.float32))), attn.ATTN_E_DTYPE, "uint8"),
    (dict(random_blocks=(2, 0.5)), attn.ATTN_E_INVALID, "triple"),
    (dict(random_blocks=(0, 0.5, 1)), attn.ATTN_E_INVALID, "block"),
    (dict(random_blocks=(2, -0.1, 1)), attn.ATTN_E_INVALID, "keep_p"),
    (dict(random_blocks=(2, 1.5, 1)), attn.ATTN_E_INVALID, "keep_p"),
    (dict(random_blocks=(2, float("nan"), 1)), attn.ATTN_E_INVALID, "keep_p"),
    (dict(random_blocks=(2, "x", 1)), attn.ATTN_E_INVALID, "keep_p"),
    (dict(random_blocks=(2, 0.5, -1)), attn.ATTN_E_INVALID, "seed"),
    (dict(random_blocks=(2, 0.5, 2**64)), attn.ATTN_E_INVALID, "seed"),
    (dict(random_blocks=(2, 0.5, 1.0)), attn.ATTN_E_INVALID, "seed"),
]


@pytest.mark.parametrize("fn", ["forward", "backward", "stats"])
@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_bad_block_arguments_caught_before_c(rng, calls, fn, case):
    """(B, H, Lq, Lk) = (1, 2, 5, 6) with block_size 2: layout (3, 3) or
    (2, 3, 3). Nothing reaches C, so C never reads past a short layout."""
    kw, status, words = ERRORS[case]
    q = rng.standard_normal((1, 2, 5, 4)).astype(np.float32)
    k = rng.standard_normal((1, 2, 6, 4)).astype(np.float32)
    with pytest.raises(attn.AttnError) as e:
        if fn == "forward":
            attn.scaled_dot_product_attention(q, k, k, **kw)
        elif fn == "backward":
            attn.sdpa_backward(q, q, k, k, **kw)
        else:
            attn.stats(np.ones((1, 2, 5, 6), np.float32) / 6, **kw)
    assert e.value.status == status
    assert words in str(e.value), str(e.value)
    assert calls.log == []


def test_layout_heads_must_match_query_heads(rng):
    """With GQA the layout has one plane per QUERY head; rank 3 has one
    head, so a 3-D layout must have a single plane."""
    q = rng.standard_normal((1, 4, 5, 4)).astype(np.float32)
    k = rng.standard_normal((1, 2, 5, 4)).astype(np.float32)
    with pytest.raises(attn.AttnError, match=r"\(4, 3, 3\)"):
        attn.scaled_dot_product_attention(q, k, k, enable_gqa=True,
                                          block_sparse=(2, np.ones((2, 3, 3), bool)))
    attn.scaled_dot_product_attention(q, k, k, enable_gqa=True,
                                      block_sparse=(2, np.ones((4, 3, 3), bool)))
    q3 = q[:, 0]
    with pytest.raises(attn.AttnError, match=r"\(1, 3, 3\)"):
        attn.scaled_dot_product_attention(q3, q3, q3,
                                          block_sparse=(2, np.ones((2, 3, 3), bool)))
    attn.scaled_dot_product_attention(q3, q3, q3,
                                      block_sparse=(2, np.ones((1, 3, 3), bool)))

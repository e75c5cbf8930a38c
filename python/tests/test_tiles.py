"""weight_tiles (streamed weights) and block_average against the NumPy
oracle; callbacks that stop, raise, or are called from the caller's
thread only."""

import threading

import numpy as np
import pytest

import attn
import npref
from conftest import SANITIZED, make

# Past the 256 x 256 flash tiles on both axes: several tiles per map.
LQ, LK = (260, 270) if SANITIZED else (300, 520)


def assemble(query, key, lse=None, **kw):
    """The weights put together from the tiles, and how often each entry
    arrived."""
    shape = kw.pop("score_shape")
    got = np.full(shape, np.nan, dtype=np.float32)
    seen = np.zeros(shape, dtype=np.int64)

    def cb(index, q0, k0, tile):
        assert not tile.flags.writeable
        sl = index + (slice(q0, q0 + tile.shape[0]), slice(k0, k0 + tile.shape[1]))
        got[sl] = tile
        seen[sl] += 1

    n = attn.weight_tiles(query, key, lse, cb, **kw)
    return got, seen, n


def reference_weights(q64, k64, rank, heads3=False, **kw):
    w = npref.sdpa(npref.to4(q64, rank, heads3), npref.to4(k64, rank, heads3),
                   npref.to4(k64, rank, heads3), **kw)[1]
    return w


CASES = [
    dict(rank=4, B=2, H=2, Hkv=2),
    dict(rank=4, B=1, H=4, Hkv=2, is_causal=True, align="bottom-right"),
    dict(rank=3, B=2, window=(40, 3)),
    dict(rank=3, H=4, Hkv=2, gqa3=True, is_causal=True),
    dict(rank=2, blocks=True),
    dict(rank=4, B=2, H=2, Hkv=2, key_lengths=[LK, 100], mask=True, blocks=True),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_tiles_cover_the_weights(rng, case):
    c = CASES[case]
    r = c["rank"]
    lead = {4: (c.get("B", 1), c.get("H", 1)), 3: (c.get("H", c.get("B", 1)),), 2: ()}[r]
    lead_kv = {4: (c.get("B", 1), c.get("Hkv", 1)),
               3: (c.get("Hkv", c.get("B", 1)),), 2: ()}[r]
    q, q64, _ = make(rng, lead + (LQ, 8))
    k, k64, _ = make(rng, lead_kv + (LK, 8))
    score_shape = lead + (LQ, LK)
    kw = dict(is_causal=c.get("is_causal", False), window=c.get("window"),
              key_lengths=c.get("key_lengths"),
              causal_alignment=c.get("align", "top-left"),
              enable_gqa=c.get("Hkv", 1) != c.get("H", 1))
    m = None
    if c.get("mask"):
        m = rng.standard_normal((LQ, LK)).astype(np.float32)
        m[:, 7] = -np.inf
        kw["attn_mask"] = m
    bkeep = None
    if c.get("blocks"):
        lay = rng.random((-(-LQ // 64), -(-LK // 64))) < 0.5
        lay[:, 0] = True
        kw["block_sparse"] = (64, lay)
        kw["random_blocks"] = (32, 0.7, 3)
        H4 = lead[1] if r == 4 else 1
        bkeep = npref.block_keep(1, H4, LQ, LK, (64, lay), (32, 0.7, 3))
    got, seen, n = assemble(q, k, score_shape=score_shape, **kw)
    assert n == int(np.prod(lead, dtype=np.int64)) * 2 * (-(-LK // 256))
    assert np.all(seen == 1), "every weight arrives exactly once"
    mask = None
    if m is not None or bkeep is not None:
        mask = np.ones((1, 1, LQ, LK), bool) if bkeep is None else bkeep
        if m is not None:
            mask = np.where(mask, m.astype(np.float64), -np.inf)
    want = reference_weights(q64, k64, r, c.get("gqa3", False), mask=mask,
                             is_causal=kw["is_causal"], align=kw["causal_alignment"],
                             window=kw["window"], key_lengths=kw["key_lengths"])
    np.testing.assert_allclose(got, want.reshape(score_shape), rtol=0, atol=2e-6)
    # lse passed in (from the forward) gives the same tiles bitwise
    _, lse = attn.scaled_dot_product_attention(q, k, k, return_lse=True, **kw)
    got2, _, _ = assemble(q, k, lse, score_shape=score_shape, **kw)
    assert np.array_equal(got, got2)


def test_float16_and_bfloat16(rng):
    for dt in ("float16", "bfloat16"):
        q, q64, d = make(rng, (2, 17, 4), dt)
        k, k64, _ = make(rng, (2, 9, 4), dt)
        got, seen, _ = assemble(q, k, score_shape=(2, 17, 9), is_causal=True, dtype=d)
        want = reference_weights(q64, k64, 3, is_causal=True)
        np.testing.assert_allclose(got, want.reshape(got.shape), rtol=0, atol=2e-6)


def test_stop_early(rng):
    q, _, _ = make(rng, (2, 2, LQ, 4))
    calls = []
    n = attn.weight_tiles(q, q, None, lambda *a: calls.append(a[:3]) or True)
    assert n == 1 and calls == [((0, 0), 0, 0)]
    calls.clear()
    n = attn.weight_tiles(q, q, None, lambda *a: calls.append(a[:3]) or len(calls) == 3)
    assert n == 3 and [c[0] for c in calls] == [(0, 0)] * 3


class Stop(BaseException):
    """Not an Exception: like KeyboardInterrupt, must still come through."""


@pytest.mark.parametrize("exc", [ValueError("boom"), ZeroDivisionError("zero"),
                                 Stop("stop")])
def test_exception_in_callback_stops_and_is_raised(rng, exc):
    q, _, _ = make(rng, (2, 2, LQ, 4))
    seen = []

    def cb(index, q0, k0, tile):
        seen.append(index)
        if len(seen) == 2:
            raise exc
    with pytest.raises(type(exc)) as e:
        attn.weight_tiles(q, q, None, cb)
    assert e.value is exc
    assert len(seen) == 2, "the stream stopped at the exception"
    # nothing left behind: the next stream is whole
    assert attn.weight_tiles(q, q, None, lambda *a: None) == 4 * (-(-LQ // 256)) ** 2


def test_callback_runs_on_the_callers_thread_one_at_a_time(rng):
    q, _, _ = make(rng, (2, 3, LQ, 4))
    k, _, _ = make(rng, (2, 3, LK, 4))
    me = threading.get_ident()
    inside = [0]
    bad = []

    def cb(index, q0, k0, tile):
        inside[0] += 1
        if inside[0] != 1 or threading.get_ident() != me:
            bad.append(index)
        inside[0] -= 1

    attn.weight_tiles(q, k, None, cb)
    assert bad == []


def test_errors_before_c(rng, calls):
    q, _, _ = make(rng, (2, 5, 4))
    for args, kw, words in (
            ((q, q, None, "not callable"), {}, "callback"),
            ((q, q, np.zeros((2, 4), np.float32), print), {}, "lse has shape"),
            ((q, q, np.zeros((2, 5), np.int32), print), {}, "float array"),
            ((q, q[:, :, :3], None, print), {}, "features")):
        with pytest.raises(attn.AttnError, match=words):
            attn.weight_tiles(*args, **kw)
    for kw, words in ((dict(max_cells=0), "max_cells"), (dict(max_cells=True), "max_cells"),
                      (dict(index=2), "index"), (dict(index=(0, 0)), "index")):
        with pytest.raises(attn.AttnError, match=words):
            attn.block_average(q, q, **kw)
    assert calls.log == []


def block_mean(w, max_cells):
    """Means of blocks of ceil(L / max_cells) positions (last ones shorter)."""
    Lq, Lk = w.shape[-2:]
    fr, fc = -(-Lq // max_cells), -(-Lk // max_cells)
    R, C = -(-Lq // fr), -(-Lk // fc)
    out = np.zeros(w.shape[:-2] + (R, C))
    for r in range(R):
        for c in range(C):
            out[..., r, c] = w[..., r * fr:(r + 1) * fr, c * fc:(c + 1) * fc].mean(
                axis=(-1, -2))
    return out, fr, fc


@pytest.mark.parametrize("max_cells", [1, 7, 64, 4096])
def test_block_average_all_maps(rng, max_cells):
    q, q64, _ = make(rng, (2, 2, LQ, 8))
    k, k64, _ = make(rng, (2, 2, LK, 8))
    lay = np.ones((2, -(-LQ // 50), -(-LK // 50)), bool)
    lay[1, 1:, 2:] = False
    kw = dict(is_causal=True, block_sparse=(50, lay), key_lengths=[LK, 200])
    avg, vis = attn.block_average(q, k, max_cells=max_cells, return_visible=True, **kw)
    keep = npref.block_keep(2, 2, LQ, LK, (50, lay))
    w = npref.sdpa(q64, k64, k64, mask=keep, is_causal=True, key_lengths=[LK, 200])[1]
    want, fr, fc = block_mean(w, max_cells)
    assert avg.shape == want.shape and avg.dtype == np.float32
    np.testing.assert_allclose(avg, want, rtol=1e-5, atol=1e-8)
    vis_all = keep & npref.visible(2, 2, LQ, LK, True, key_lengths=[LK, 200])
    want_vis = block_mean(vis_all.astype(np.float64), max_cells)[0] > 0
    assert np.array_equal(vis, want_vis)
    if max_cells >= max(LQ, LK):  # blocks of one position: the weights
        np.testing.assert_allclose(avg, w, rtol=1e-5, atol=1e-8)


def test_block_average_one_map_and_heatmap(rng, tmp_path):
    q, q64, _ = make(rng, (3, LQ, 8))
    k, k64, _ = make(rng, (3, LK, 8))
    one, vis = attn.block_average(q, k, index=1, max_cells=16, window=(30, 0),
                                  return_visible=True)
    w = npref.sdpa(q64[:, None], k64[:, None], k64[:, None], window=(30, 0))[1][:, 0]
    want = block_mean(w[1], 16)[0]
    assert one.shape == want.shape
    np.testing.assert_allclose(one, want, rtol=1e-5, atol=1e-8)
    assert not vis.all() and vis.any()
    p = tmp_path / "long.svg"
    attn.heatmap(one, str(p), attn_mask=vis, x_extent=LK, y_extent=LQ)
    assert p.read_text().startswith("<?xml")
    # rank 2 and the GQA rank-3 layout (heads on axis 0)
    two = attn.block_average(q[0], k[0], max_cells=16, window=(30, 0))
    np.testing.assert_allclose(two, block_mean(w[0], 16)[0], rtol=1e-5, atol=1e-8)
    g = attn.block_average(q, k[:1], enable_gqa=True, max_cells=16)
    wg = npref.sdpa(q64[None], k64[None, :1], k64[None, :1])[1][0]
    np.testing.assert_allclose(g, block_mean(wg, 16)[0], rtol=1e-5, atol=1e-8)

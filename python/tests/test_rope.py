"""attn.rope against a NumPy reference written from the formulas (every
style and scaling, partial dims, positions with offsets, per-batch
positions), its backward against central differences, and bad input."""
import numpy as np
import pytest

import attn


def np_inv_freq(rd, theta, scaling):
    f = 1.0 / theta ** (np.arange(0, rd, 2, dtype=np.float64) / rd)
    if scaling is None:
        return f
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "linear":
        return f / scaling["factor"]
    # llama3, as transformers' _compute_llama3_parameters writes it
    factor, lo, hi = (scaling["factor"], scaling["low_freq_factor"],
                      scaling["high_freq_factor"])
    old = scaling["original_max_position_embeddings"]
    wl = 2 * np.pi / f
    llama = np.where(wl > old / lo, f / factor, f)
    smooth = (old / wl - lo) / (hi - lo)
    smoothed = (1 - smooth) * llama / factor + smooth * llama
    medium = ~(wl < old / hi) & ~(wl > old / lo)
    return np.where(medium, smoothed, llama)


def np_rope(x, pos, theta, style, rd, scaling):
    """x (B, H, L, D), pos (B, L)."""
    D = x.shape[-1]
    rd = rd or D
    f = np_inv_freq(rd, theta, scaling)
    ang = pos[:, None, :, None].astype(np.float64) * f  # (B, 1, L, rd/2)
    c, s = np.cos(ang), np.sin(ang)
    y = x.astype(np.float64).copy()
    xr = y[..., :rd].copy()
    if style == "neox":
        a, b = xr[..., :rd // 2], xr[..., rd // 2:]
        y[..., :rd // 2] = a * c - b * s
        y[..., rd // 2:rd] = a * s + b * c
    else:
        a, b = xr[..., 0::2], xr[..., 1::2]
        y[..., 0:rd:2] = a * c - b * s
        y[..., 1:rd:2] = a * s + b * c
    return y


SCALINGS = [None, {"rope_type": "linear", "factor": 4.0},
            {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
             "high_freq_factor": 4.0, "original_max_position_embeddings": 64}]


@pytest.mark.parametrize("style", ["neox", "interleaved"])
@pytest.mark.parametrize("scaling", SCALINGS)
@pytest.mark.parametrize("rd", [None, 6])
def test_rope_matches_numpy(style, scaling, rd):
    rng = np.random.default_rng(0)
    B, H, L, D = 2, 3, 7, 16
    x = rng.standard_normal((B, H, L, D))
    for positions in (None, np.arange(L) + 1000, rng.integers(0, 5000, (B, L))):
        pos = np.broadcast_to(np.arange(L) if positions is None else positions,
                              (B, L))
        want = np_rope(x, pos, 10000.0, style, rd, scaling)
        got = attn.rope(x, positions, style=style, rotary_dim=rd,
                        scaling=scaling)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        got32 = attn.rope(x.astype(np.float32), positions, style=style,
                          rotary_dim=rd, scaling=scaling)
        assert got32.dtype == np.float32
        np.testing.assert_allclose(got32, want, rtol=0, atol=2e-6)
        # backward: <rope(x), g> differentiated by central differences
        g = rng.standard_normal(x.shape)
        dx = attn.rope_backward(g, positions, style=style, rotary_dim=rd,
                                scaling=scaling)
        e = np.zeros_like(x)
        for idx in [(0, 0, 0, 0), (1, 2, 6, 15), (0, 1, 3, 2), (1, 0, 5, 9)]:
            e[...] = 0
            e[idx] = 1e-6
            lp = (attn.rope(x + e, positions, style=style, rotary_dim=rd,
                            scaling=scaling) * g).sum()
            lm = (attn.rope(x - e, positions, style=style, rotary_dim=rd,
                            scaling=scaling) * g).sum()
            assert abs((lp - lm) / 2e-6 - dx[idx]) < 1e-7


def test_inv_freq_and_ranks():
    f = attn.rope_inv_freq(8, theta=100.0)
    np.testing.assert_allclose(f, 100.0 ** (-np.arange(0, 8, 2) / 8), rtol=1e-15)
    x = np.ones((5, 4), np.float32)
    assert attn.rope(x).shape == (5, 4)
    assert attn.rope(np.ones((2, 5, 4))).shape == (2, 5, 4)


def test_bad_input():
    x = np.ones((1, 1, 3, 6))
    with pytest.raises(attn.AttnError, match="rotary_dim 3"):
        attn.rope(x, rotary_dim=3)
    with pytest.raises(attn.AttnError, match="yarn"):
        attn.rope(x, scaling={"rope_type": "yarn", "factor": 2.0})
    with pytest.raises(attn.AttnError, match="style"):
        attn.rope(x, style="halves")
    with pytest.raises(attn.AttnError, match="positions"):
        attn.rope(x, positions=[0, 1])
    with pytest.raises(attn.AttnError, match=r"positions\[1\] = -1"):
        attn.rope(x, positions=[0, -1, 2])
    with pytest.raises(attn.AttnError, match="theta"):
        attn.rope(x, theta=0.5)
    x[0, 0, 1, 1] = np.nan
    with pytest.raises(attn.AttnError):
        attn.rope(x)

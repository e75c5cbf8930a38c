"""attn.heatmap, attn.stats, attn.text_heatmap and attn.compare over the C
pictures/diagnostics library: files written, numbers against NumPy, errors."""

import re

import numpy as np
import pytest

import attn
import npref
from conftest import make

GREY = "rgb(54.901961%,54.901961%,54.901961%)"  # ATTN_RGB_MASKED in SVG


def weights(rng, shape, causal=True):
    q, _, _ = make(rng, shape[:-1] + (8,))
    k, _, _ = make(rng, shape[:-2] + (shape[-1], 8))
    return attn.scaled_dot_product_attention(q, k, k, is_causal=causal,
                                             return_weights=True)[1]


def svg_fills(path):
    return set(re.findall(r"fill:(rgb\([^)]*\))", open(path).read()))


@pytest.mark.parametrize("ext,magic", [(".png", b"\x89PNG\r\n\x1a\n"),
                                       (".svg", b"<?xml"), (".pdf", b"%PDF")])
def test_heatmap_formats(rng, tmp_path, ext, magic):
    w = weights(rng, (4, 4))
    path = tmp_path / ("w" + ext)
    assert attn.heatmap(w, path, title="four tokens") == path
    assert path.read_bytes().startswith(magic)


def test_heatmap_tokens_and_mask(rng, tmp_path):
    w = weights(rng, (3, 3))
    toks = ["I", "like", "tea"]
    plain, masked = tmp_path / "plain.svg", tmp_path / "masked.svg"
    attn.heatmap(w, str(plain), x_tokens=toks, y_tokens=toks, annotate=True)
    attn.heatmap(w, str(masked), x_tokens=toks, y_tokens=toks, is_causal=True)
    text = plain.read_text()
    assert all(t in text for t in toks)  # the SVG's searchable text layer
    # masked cells are grey only when a mask is given
    assert GREY not in svg_fills(plain) and GREY in svg_fills(masked)
    m = np.tril(np.ones((3, 3), bool))
    bool_masked = tmp_path / "bool.svg"
    attn.heatmap(w, bool_masked, attn_mask=m)
    assert GREY in svg_fills(bool_masked)


def test_heatmap_grid_and_index(rng, tmp_path, calls):
    w = weights(rng, (2, 3, 5, 5))
    attn.heatmap(w, tmp_path / "grid.png")
    assert calls.log[-1][0] == "attn_heatmap_grid_write"
    attn.heatmap(w, tmp_path / "one.png", index=(1, 2))
    assert calls.log[-1][0] == "attn_heatmap_write"
    attn.heatmap(w[0], tmp_path / "head.png", index=1)
    # any strides: a transposed view reaches C as it is
    wt = np.swapaxes(w, 2, 3)
    attn.heatmap(wt, tmp_path / "t.png")
    assert calls.log[-1][1]["w"][0] == wt.ctypes.data


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_heatmap_dtypes(rng, tmp_path, dtype):
    w = weights(rng, (4, 6), causal=False)
    if dtype == "bfloat16":
        attn.heatmap(npref.f32_to_bf16(w), tmp_path / "w.png", dtype="bfloat16")
    else:
        attn.heatmap(w.astype(dtype), tmp_path / "w.png")
    assert (tmp_path / "w.png").stat().st_size > 100


def test_heatmap_errors(rng, tmp_path, calls):
    w = weights(rng, (2, 3, 4, 4))
    calls.log.clear()
    E = attn
    cases = [
        (E.ATTN_E_SHAPE, "x_tokens has 2 tokens but the weights have 4",
         dict(x_tokens=["a", "b"])),
        (E.ATTN_E_SHAPE, "index h = 3 is outside [0, 3)", dict(index=(0, 3))),
        (E.ATTN_E_INVALID, "(n, h) is needed", dict(index=1)),
        (E.ATTN_E_INVALID, "give both vmin and vmax", dict(vmin=0.0)),
        (E.ATTN_E_INVALID, "cmap is 'jet'", dict(cmap="jet")),
        (E.ATTN_E_INVALID, "annotate is 2", dict(annotate=2)),
        (E.ATTN_E_DTYPE, "attn_mask has dtype float32; bool (True = attend) is "
         "needed", dict(attn_mask=np.zeros((4, 4), np.float32))),
        (E.ATTN_E_SHAPE, "cannot broadcast", dict(attn_mask=np.ones((3, 4), bool))),
    ]
    for status, words, kw in cases:
        with pytest.raises(attn.AttnError) as e:
            attn.heatmap(w, tmp_path / "x.png", **kw)
        assert e.value.status == status and words in str(e.value), str(e.value)
    assert calls.log == []
    for bad, status, words in [(w.astype(np.int32), E.ATTN_E_DTYPE, "int32"),
                               (w[None, None], E.ATTN_E_SHAPE, "rank 6"),
                               (w[..., :0], E.ATTN_E_SHAPE, "empty axis")]:
        with pytest.raises(attn.AttnError) as e:
            attn.heatmap(bad, tmp_path / "x.png")
        assert e.value.status == status and words in str(e.value)
    # found by C: the extension, an unwritable file
    with pytest.raises(attn.AttnError) as e:
        attn.heatmap(w, tmp_path / "x.bmp")
    assert e.value.status == E.ATTN_E_INVALID and ".bmp" in str(e.value)
    with pytest.raises(attn.AttnError) as e:
        attn.heatmap(w, tmp_path / "no" / "such" / "dir.png")
    assert e.value.status == E.ATTN_E_IO


def np_stats(w, vis):
    """Row sums, normalized entropy over visible keys and leaks in NumPy."""
    w = w.astype(np.float64).reshape(-1, w.shape[-1])
    vis = np.broadcast_to(vis, w.shape if vis.ndim == 2 else vis.shape).reshape(w.shape)
    nvis = vis.sum(-1)
    expected = (nvis > 0).astype(np.float64)
    dev = np.abs(w.sum(-1) - expected)
    ent = []
    for row, v in zip(w, vis):
        p = row[v]
        if v.sum() >= 2 and p.sum() > 0:
            p = p / p.sum()
            p = p[p > 0]
            ent.append(-(p * np.log(p)).sum() / np.log(v.sum()))
    leak = np.abs(np.where(vis, 0, w))
    return dict(rows=w.shape[0], rows_empty=int((nvis == 0).sum()),
                row_sum_dev_max=dev.max(), row_sum_dev_mean=dev.mean(),
                entropy_rows=len(ent), entropy_mean=np.mean(ent),
                entropy_min=np.min(ent), entropy_max=np.max(ent),
                leak_total=leak.sum(), leak_max=leak.max(),
                leak_count=int((leak > 0).sum()), max_weight=w.max())


def test_stats_against_numpy(rng):
    w = weights(rng, (2, 3, 6, 9)).copy()
    w[1, 2, 0, 5] = 0.25                    # weight on a masked key
    vis = npref.visible(2, 3, 6, 9, is_causal=True, key_lengths=[9, 4])
    s = attn.stats(w, is_causal=True, key_lengths=[9, 4])
    want = np_stats(w, vis)
    for key, val in want.items():
        assert s[key] == pytest.approx(val, abs=1e-6), key
    assert "mask_leak" in s["flags"] and "not_normalized" in s["flags"]
    assert s["verdict"] & 4 and s["verdict"] & 8
    assert "masked leakage" in s["advice"]


def test_stats_flags(rng):
    L = 16
    uniform = np.full((2, L, L), 1.0 / L, np.float32)
    s = attn.stats(uniform)
    assert s["flags"] == ["too_uniform"] and s["entropy_mean"] == pytest.approx(1.0)
    onehot = np.broadcast_to(np.eye(L, dtype=np.float32), (2, L, L))
    assert attn.stats(onehot)["flags"] == ["too_concentrated"]
    bad = uniform.copy()
    bad[0, 3, 3] = np.nan
    s = attn.stats(bad)
    assert "nonfinite" in s["flags"] and s["nan_count"] == 1
    healthy = weights(rng, (2, 4, 12, 12), causal=False)
    s = attn.stats(healthy)
    assert s["flags"] == [] and s["advice"].startswith("looks healthy")


def test_stats_per_head(rng):
    w = weights(rng, (2, 3, 5, 5))
    s = attn.stats(w, is_causal=True, per_head=True)
    assert len(s["per_head"]) == 2 and all(len(r) == 3 for r in s["per_head"])
    for n in range(2):
        for h in range(3):
            one = attn.stats(w[n, h], is_causal=True)
            assert s["per_head"][n][h]["entropy_mean"] == pytest.approx(
                one["entropy_mean"])
    assert len(attn.stats(w[0], per_head=True)["per_head"]) == 3


def test_text_heatmap(rng):
    w = weights(rng, (4, 4))
    toks = ["the", "cat", "sat", "on"]
    text = attn.text_heatmap(w, x_tokens=toks, y_tokens=toks, is_causal=True,
                             title="causal")
    lines = text.splitlines()
    assert lines[0] == "causal"
    assert all(t in text for t in toks)
    assert "x" in text and "\x1b[" not in text  # masked cells, no escapes
    colored = attn.text_heatmap(w, color="truecolor")
    assert "\x1b[38;2;" in colored or "\x1b[48;2;" in colored
    with pytest.raises(attn.AttnError):
        attn.text_heatmap(w, color="rainbow")


def test_compare(rng):
    a = weights(rng, (2, 5, 7), causal=False)
    b = 0.8 * a + 0.2 / 7
    r = attn.compare(a, b)
    d = np.abs(a.astype(np.float64) - b)
    assert r["max_abs"] == pytest.approx(d.max(), abs=1e-7)
    assert r["mean_abs"] == pytest.approx(d.mean(), abs=1e-7)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    kl = np.where(a64 > 0, a64 * np.log(a64 / b64), 0).sum(-1)
    assert r["mean_kl"] == pytest.approx(kl.mean(), rel=1e-4)
    assert r["max_kl"] == pytest.approx(kl.max(), rel=1e-4)
    assert r["rows"] == 10
    with pytest.raises(attn.AttnError) as e:
        attn.compare(a, b[:, :4])
    assert e.value.status == attn.ATTN_E_SHAPE


def test_encoder_weights_rank5(rng, tmp_path):
    """EncoderLayer(return_weights=True) gives (layer, batch, head, L, L):
    every picture and diagnostic takes it, with the axes named."""
    enc = attn.EncoderLayer(8, 2, 16, num_layers=2, seed=1)
    x = rng.standard_normal((3, 5, 8)).astype(np.float32)
    _, w = enc(x, return_weights=True)
    assert w.shape == (2, 3, 2, 5, 5)
    p = attn.heatmap(w, str(tmp_path / "enc.svg"))
    assert ">layer 1, batch 2, head 1</text>" in open(p).read()
    attn.heatmap(w, str(tmp_path / "one.png"), index=(1, 2, 0))
    s = attn.stats(w, per_head=True)
    assert len(s["per_head"]) == 2 and len(s["per_head"][0]) == 3
    assert len(s["per_head"][1][2]) == 2
    ref = attn.stats(w[1, 2, 0])
    assert s["per_head"][1][2][0]["entropy_mean"] == pytest.approx(ref["entropy_mean"])
    attn.html(w, str(tmp_path / "enc.html"), batch=2)
    with pytest.raises(attn.AttnError):
        attn.html(w, str(tmp_path / "enc.html"), batch=3)


def test_grid_titles_say_batch(rng, tmp_path):
    """(B, H, Lq, Lk) attention weights: the first axis is the batch."""
    w = weights(rng, (2, 2, 4, 4))
    svg = open(attn.heatmap(w, str(tmp_path / "g.svg"))).read()
    assert ">batch 1, head 1</text>" in svg and "layer" not in svg


def test_html_axis_names(rng, tmp_path):
    """html names its axes as heatmap does: x_tokens keys, y_tokens queries."""
    w = weights(rng, (2, 3), causal=False)
    p = attn.html(w, str(tmp_path / "v.html"), x_tokens=["k0", "k1", "k2"],
                  y_tokens=["q0", "q1"])
    page = open(p).read()
    assert '"q":["q0","q1"]' in page and '"k":["k0","k1","k2"]' in page


def test_axis_names(rng, tmp_path):
    """Weights are named by their axes in every picture and summary: the
    rank says them ((batch, Lq, Lk), (batch, head, Lq, Lk)), axes= names
    others (PyTorch's unbatched (head, Lq, Lk), a stack of layers)."""
    w4 = weights(rng, (2, 3, 4, 4))
    assert attn.stats(w4)["axes"] == ("batch", "head")
    p = attn.heatmap(w4[:, 0], str(tmp_path / "b.svg"))
    text = open(p).read()
    assert ">batch 1</text>" in text and "head 0" not in text
    p = attn.heatmap(w4, str(tmp_path / "l.svg"), axes=("layer", "head"))
    text = open(p).read()
    assert ">layer 1, head 2</text>" in text and "batch" not in text
    p = attn.heatmap(w4[0], str(tmp_path / "h.svg"), axes="head")
    assert ">head 2</text>" in open(p).read()
    s = attn.stats(w4, axes=("head", "layer"), per_head=True)
    assert s["axes"] == ("head", "layer") and len(s["per_head"]) == 2
    assert len(s["per_head"][0]) == 3
    attn.html(w4, str(tmp_path / "b.html"))
    assert '"axis":"batch"' in open(tmp_path / "b.html").read()
    attn.html(w4, str(tmp_path / "l.html"), axes=("layer", "head"))
    assert '"axis":"layer"' in open(tmp_path / "l.html").read()
    with pytest.raises(attn.AttnError, match="distinct names"):
        attn.stats(w4, axes=("layer", "layer"))
    with pytest.raises(attn.AttnError, match="distinct names"):
        attn.stats(w4, axes=("head",))

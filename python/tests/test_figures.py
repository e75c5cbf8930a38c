"""attn.html, attn.figure, attn.diff_heatmap and attn.geometry over the C
viz library: files written, self-contained, carrying the tokens and the
numbers; bad input refused."""

import json
import re

import numpy as np
import pytest

import attn
from test_viz import GREY, svg_fills, weights


def embedded(path):
    """The JSON the viewer embeds: {"title", "layers", "heads", "lq", "lk",
    "q", "k", "w"}."""
    text = open(path, encoding="utf-8").read()
    m = re.search(r'\{"title":.*?"w":\[[^\]]*\]\}', text, re.S)
    assert m, "no embedded data"
    return text, json.loads(m.group(0))


def test_html_self_contained_with_tokens(rng, tmp_path):
    w = weights(rng, (2, 3, 5, 5))
    toks = ["The", "cat", "sat", "</script>", "caf\u00e9"]
    path = tmp_path / "view.html"
    assert attn.html(w, path, tokens=toks, title="two layers") == path
    text, d = embedded(path)
    # the only URL is the SVG namespace name (an identifier that
    # createElementNS needs; nothing is fetched)
    bare = text.replace("http://www.w3.org/2000/svg", "")
    assert "http://" not in bare and "https://" not in bare
    assert not re.search(r"\b(src|href)\s*=", text) and "<link" not in text
    assert "@import" not in text and "url(" not in text
    assert text.count("</script>") == text.count("<script")  # token escaped
    assert d["q"] == toks and d["k"] == toks  # keys take the query tokens
    assert (d["title"], d["layers"], d["heads"], d["lq"], d["lk"]) == \
        ("two layers", 2, 3, 5, 5)
    np.testing.assert_allclose(np.array(d["w"]).reshape(w.shape), w, rtol=1e-3,
                               atol=1e-6)


def test_html_cross_attention_and_layouts(rng, tmp_path):
    w = weights(rng, (4, 6), causal=False)
    qt, kt = ["a", "b", "c", "d"], ["u", "v", "w", "x", "y", "z"]
    path = tmp_path / "cross.html"
    attn.html(w.T.T, str(path), tokens=qt, key_tokens=kt)  # any strides
    _, d = embedded(path)
    assert (d["q"], d["k"], d["layers"], d["heads"]) == (qt, kt, 1, 1)
    np.testing.assert_allclose(np.array(d["w"]).reshape(4, 6), w, rtol=1e-3, atol=1e-6)
    # transposed view: values read through the strides
    attn.html(np.swapaxes(w, 0, 1), str(path))
    _, d = embedded(path)
    assert d["q"] == [str(i) for i in range(6)] and d["k"] == ["0", "1", "2", "3"]
    np.testing.assert_allclose(np.array(d["w"]).reshape(6, 4), w.T, rtol=1e-3,
                               atol=1e-6)


def test_html_errors(rng, tmp_path, calls):
    w = weights(rng, (3, 3))
    calls.log.clear()
    for args, kw, status, words in (
            ((w, tmp_path / "a.html"), dict(tokens=["a"]), attn.ATTN_E_SHAPE, "tokens"),
            ((w[:, :2], tmp_path / "a.html"), dict(key_tokens=["a"] * 3),
             attn.ATTN_E_SHAPE, "columns"),
            ((w.astype(np.int32), tmp_path / "a.html"), {}, attn.ATTN_E_DTYPE, "dtype"),
            ((w[0], tmp_path / "a.html"), {}, attn.ATTN_E_SHAPE, "rank"),
            ((w, 3.5), {}, attn.ATTN_E_INVALID, "path"),
            ((w, tmp_path / "a.html"), dict(title=3), attn.ATTN_E_INVALID, "title")):
        with pytest.raises(attn.AttnError) as e:
            attn.html(*args, **kw)
        assert e.value.status == status and words in str(e.value), str(e.value)
    assert calls.log == []
    with pytest.raises(attn.AttnError) as e:  # from C: too many tokens
        attn.html(np.full((1025, 2), 0.5, np.float32), tmp_path / "big.html")
    assert e.value.status == attn.ATTN_E_SHAPE and "1024" in str(e.value)
    with pytest.raises(attn.AttnError) as e:
        attn.html(w, tmp_path / "no" / "such" / "dir.html")
    assert e.value.status == attn.ATTN_E_IO


def test_figure_side_by_side(rng, tmp_path, calls):
    w = weights(rng, (3, 4, 4))
    calls.log.clear()
    toks = ["I", "like", "green", "tea"]
    path = tmp_path / "side.svg"
    attn.figure([w[0], w[1] * 0.5, w[2]], path, titles=["scaled", "half", "third"],
                x_tokens=toks, y_tokens=toks, title="compare", is_causal=True)
    text = path.read_text()
    assert text.startswith("<?xml")
    for word in toks + ["scaled", "half", "third", "compare"]:
        assert word in text
    assert GREY in svg_fills(path)
    name, tensors = calls.log[-1]
    assert name == "attn_figure_write" and len([k for k in tensors if k[0] == "w"]) == 3
    plain = tmp_path / "plain.svg"
    attn.figure(w, plain, ncols=2)  # a 3-D array: its maps
    assert GREY not in svg_fills(plain)
    attn.figure(w[0], tmp_path / "one.png")
    assert (tmp_path / "one.png").read_bytes().startswith(b"\x89PNG")
    for args, kw, words in (
            (([w[0], w[1]], tmp_path / "x.svg"), dict(titles=["a"]), "titles"),
            (([w], tmp_path / "x.svg"), {}, "(Lq, Lk)"),
            (([], tmp_path / "x.svg"), {}, "1 to 4096"),
            (([w[0]], tmp_path / "x.svg"), dict(ncols=0), "ncols"),
            (([w[0]], tmp_path / "x.svg"), dict(attn_mask=np.ones((4, 3), bool)),
             "broadcast")):
        with pytest.raises(attn.AttnError, match=re.escape(words)):
            attn.figure(*args, **kw)
    with pytest.raises(attn.AttnError, match="labels need equal shapes"):
        attn.figure([w[0], w[0][:, :3]], tmp_path / "x.svg", x_tokens=toks)


def test_diff_heatmap(rng, tmp_path):
    a = weights(rng, (2, 5, 5))
    b = weights(rng, (2, 5, 5), causal=False)
    path = tmp_path / "diff.svg"
    attn.diff_heatmap(a, b, path, title="causal - full")
    fills = svg_fills(path)
    assert "causal - full" in path.read_text()
    # a diverging map: both warm (red > blue) and cool cells appear
    rgb = [tuple(float(x) for x in re.findall(r"[\d.]+", f)) for f in fills]
    assert any(r > bl + 10 for r, _, bl in rgb) and any(bl > r + 10 for r, _, bl in rgb)
    same = tmp_path / "same.png"
    attn.diff_heatmap(a, a, same)
    assert same.read_bytes().startswith(b"\x89PNG")
    with pytest.raises(attn.AttnError, match="shape"):
        attn.diff_heatmap(a, b[:, :4], path)


def test_geometry(tmp_path):
    path = tmp_path / "dot.svg"
    assert attn.geometry([3, 1], np.array([2.0, 5.0]), path, "q", "k") == path
    text = path.read_text()
    assert "q \u00b7 k = 11" in text and "cos \u03b8 = 0.646" in text
    attn.geometry((0, 0), (1, 1), tmp_path / "zero.svg")
    assert "n/a" in (tmp_path / "zero.svg").read_text()
    for a, words in (([1, 2, 3], "two numbers"), (["a", "b"], "two numbers"),
                     ([np.nan, 1], "not finite")):
        with pytest.raises(attn.AttnError, match=words):
            attn.geometry(a, [1, 0], path)

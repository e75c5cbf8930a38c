"""Every weights file attn writes is named by its axes in every tool: the
file's rank says them ((batch, Lq, Lk), (batch, head, Lq, Lk), (layer,
batch, head, Lq, Lk)), and attn stats, heatmap --grid, html and show use
those names; --axes names the axes of files from elsewhere. One check per
writer: sdpa, mha (batched and not), encoder (batched and not), attend
(the toy encoder and an encoder-decoder), and the demo's drawing helper.

usage: cli_axes.py PATH/TO/attn SOURCE_DIR
"""
import os
import re
import shutil
import tempfile

import numpy as np

from clitest import check, run, summary

D = tempfile.mkdtemp(prefix="attn_axes_")


def path(name):
    return os.path.join(D, name)


def save(name, a):
    np.save(path(name), a)
    return path(name)


def svg_text(p):
    """The text layer of an SVG picture (labels and titles)."""
    return open(p, encoding="utf-8").read()


def tools(w, names, first, maps, tag, axes=None, grid=None):
    """stats, heatmap --grid, html and show on weights file w: names is the
    axes line of stats ("(batch, head, query, key)"), first the name of the
    viewer's first picker, maps a list of map names that must appear in the
    stats table and as panel titles of the grid."""
    extra = ["--axes", axes] if axes else []
    p = run(["stats", w] + extra)
    check(p.returncode == 0 and names in p.stdout,
          "%s: stats names the axes %s: %s" % (tag, names, p.stdout + p.stderr))
    for m in maps:
        check(re.search(r"^%s\s" % re.escape(m), p.stdout, re.M) is not None,
              "%s: stats has a row '%s': %s" % (tag, m, p.stdout))
    g = path(tag + "_grid.svg")
    p = run(["heatmap", w, "--grid", "-o", g] + extra)
    check(p.returncode == 0, "%s: heatmap --grid: %s" % (tag, p.stderr))
    if p.returncode == 0:
        text = svg_text(g)
        for m in grid or maps:
            check(m in text, "%s: grid panel titled '%s'" % (tag, m))
        for wrong in ("batch", "layer", "head"):
            if wrong not in names:
                check("%s 0" % wrong not in text,
                      "%s: no panel says '%s'" % (tag, wrong))
    h = path(tag + ".html")
    p = run(["html", w, "-o", h] + extra)
    check(p.returncode == 0, "%s: html: %s" % (tag, p.stderr))
    if p.returncode == 0:
        page = open(h, encoding="utf-8").read()
        check('"axis":"%s"' % first in page,
              "%s: the viewer's first picker is '%s'" % (tag, first))
    p = run(["show", w, "--color", "plain"] + extra)
    check(p.returncode == 0, "%s: show: %s" % (tag, p.stderr))
    if len(maps) > 1:
        line = p.stdout.split("\n")[0]
        check(re.search(r" 0 of \d+ maps, \(", line) is not None and "--map" in line,
              "%s: show says which map it draws and how to pick another: %s"
              % (tag, p.stdout.split("\n")[0]))


def sdpa():
    rng = np.random.default_rng(0)
    q = save("q4.npy", rng.standard_normal((2, 3, 5, 4)).astype(np.float32))
    p = run(["sdpa", "--q", q, "--k", q, "--v", q, "--out", path("o4.npy"),
             "--weights", path("w_sdpa.npy")])
    check(p.returncode == 0, "sdpa: " + p.stderr)
    tools(path("w_sdpa.npy"), "(batch, head, query, key)", "batch",
          ["batch 1 head 2", "batch 0 head 0"], "sdpa")
    q3 = save("q3.npy", rng.standard_normal((2, 5, 4)).astype(np.float32))
    p = run(["sdpa", "--q", q3, "--k", q3, "--v", q3, "--out", path("o3.npy"),
             "--weights", path("w_sdpa3.npy")])
    check(p.returncode == 0, "sdpa rank 3: " + p.stderr)
    tools(path("w_sdpa3.npy"), "(batch, query, key)", "batch",
          ["batch 0", "batch 1"], "sdpa3")


def mha():
    rng = np.random.default_rng(1)
    x = save("x2.npy", rng.standard_normal((5, 8)).astype(np.float32))
    p = run(["mha", "--query", x, "--out", path("mo.npy"), "--init-seed", "1",
             "--heads", "2", "--weights", path("w_mha.npy")])
    check(p.returncode == 0, "mha: " + p.stderr)
    w = np.load(path("w_mha.npy"))
    check(w.shape == (1, 2, 5, 5), "mha of an (L, E) input: (1, H, L, L), got %s"
          % (w.shape,))
    tools(path("w_mha.npy"), "(batch, head, query, key)", "batch",
          ["batch 0 head 1"], "mha", grid=["head 1"])
    x3 = save("x3.npy", rng.standard_normal((3, 5, 8)).astype(np.float32))
    p = run(["mha", "--query", x3, "--out", path("mo3.npy"), "--init-seed", "1",
             "--heads", "2", "--weights", path("w_mha3.npy")])
    check(p.returncode == 0, "mha batched: " + p.stderr)
    tools(path("w_mha3.npy"), "(batch, head, query, key)", "batch",
          ["batch 2 head 1"], "mha3")


def encoder():
    rng = np.random.default_rng(2)
    x = save("ex2.npy", rng.standard_normal((5, 8)).astype(np.float32))
    p = run(["encoder", "--x", x, "--out", path("eo.npy"), "--init-seed", "1",
             "--layers", "2", "--heads", "2", "--ff", "16",
             "--weights", path("w_enc.npy")])
    check(p.returncode == 0, "encoder: " + p.stderr)
    w = np.load(path("w_enc.npy"))
    check(w.shape == (2, 1, 2, 5, 5), "encoder of an (L, E) input: (N, 1, H, L, L), "
          "got %s" % (w.shape,))
    tools(path("w_enc.npy"), "(layer, batch, head, query, key)", "layer",
          ["layer 1 head 0", "layer 0 head 1"], "encoder")
    x3 = save("ex3.npy", rng.standard_normal((2, 5, 8)).astype(np.float32))
    p = run(["encoder", "--x", x3, "--out", path("eo3.npy"), "--init-seed", "1",
             "--layers", "2", "--heads", "2", "--ff", "16",
             "--weights", path("w_enc3.npy")])
    check(p.returncode == 0, "encoder batched: " + p.stderr)
    tools(path("w_enc3.npy"), "(layer, batch, head, query, key)", "layer",
          ["layer 1 batch 1 head 0"], "encoder3")


def attend():
    a = path("rev.bin")
    p = run(["train", "reverse", "--layers", "2", "--d-model", "16", "--heads",
             "2", "--ff", "16", "--steps", "5", "--eval", "20", "--save", a])
    check(p.returncode == 0, "train reverse: " + p.stderr)
    out = path("maps")
    p = run(["attend", a, "--input", "3 1 4 1 5", "--out", out])
    check(p.returncode == 0, "attend (encoder): " + p.stderr)
    tools(os.path.join(out, "weights.npy"), "(layer, batch, head, query, key)",
          "layer", ["layer 1 head 0"], "attend_enc")

    d = path("date.bin")
    p = run(["train", "date", "--layers", "1", "--d-model", "16", "--heads",
             "2", "--ff", "16", "--steps", "5", "--eval", "10", "--save", d])
    check(p.returncode == 0, "train date: " + p.stderr)
    out = path("cross")
    p = run(["attend", d, "--input", "march 3, 2026", "--out", out, "--count", "5"])
    check(p.returncode == 0, "attend (encoder-decoder): " + p.stderr)
    w = os.path.join(out, "cross_weights.npy")
    check(os.path.isfile(w) and np.load(w).ndim == 5,
          "cross_weights.npy is (layer, batch, head, Lt, Ls)")
    tools(w, "(layer, batch, head, query, key)", "layer",
          ["layer 0 head 1"], "attend_cross")


def foreign():
    """Files from elsewhere: --axes names their axes."""
    w = np.full((3, 4, 4), 0.25, np.float32)  # PyTorch's unbatched (H, L, S)
    f = save("heads3.npy", w)
    tools(f, "(head, query, key)", "batch", ["head 2", "head 0"], "foreign_head",
          "head")
    w = np.full((2, 3, 4, 4), 0.25, np.float32)  # a stack (layer, head, n, n)
    f = save("layers4.npy", w)
    tools(f, "(layer, head, query, key)", "layer", ["layer 1 head 2"],
          "foreign_layer", "layer,head")
    p = run(["stats", f, "--axes", "layer"])
    check(p.returncode == 2 and "names 1 axis" in p.stderr,
          "--axes of the wrong count: " + p.stderr)
    p = run(["stats", f, "--axes", "layer,layer"])
    check(p.returncode == 2 and "distinct" in p.stderr, "--axes repeated: " + p.stderr)
    p = run(["stats", f, "--axes", "time,head"])
    check(p.returncode == 2 and "layer, batch and head" in p.stderr,
          "--axes unknown name: " + p.stderr)


sdpa()
mha()
encoder()
attend()
foreign()
rc = summary("cli_axes")
if rc == 0:
    shutil.rmtree(D)
raise SystemExit(rc)

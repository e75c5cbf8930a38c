"""The picture and diagnostics subcommands end to end on .npy files made
with NumPy: show (against the stored terminal text), heatmap (PNG/SVG/PDF),
html, stats verdicts and exact leakage, compare (KL of a known pair), and
their usage errors.

usage: cli_viz.py PATH/TO/attn SOURCE_DIR
"""
import math
import os
import sys
import tempfile

import numpy as np

from clitest import SRC as src, check, run, summary


with tempfile.TemporaryDirectory() as d:
    def path(name):
        return os.path.join(d, name)

    w3 = np.array([[1 / 3, 1 / 3, 1 / 3], [0.264458, 0.471083, 0.264458],
                   [0.532897, 0.299160, 0.167943]], dtype=np.float32)
    np.save(path("w3.npy"), w3)

    # show: the stored expected text of the 3x3 map, in every colour mode
    for mode, name in (("plain", "plain"), ("256", "256"), ("true", "truecolor")):
        p = run(["show", path("w3.npy"), "--tokens", "I like tea", "--title",
                 "three tokens", "--color", mode])
        want = open(os.path.join(src, "tests", "data", "term_3x3_%s.txt" % name),
                    encoding="utf-8").read()
        check(p.returncode == 0 and p.stdout == want, "show --color %s: %r" % (mode, p.stdout[:200]))
    p = run(["show", path("w3.npy")], env={"NO_COLOR": "1"})
    check(p.returncode == 0 and "\x1b" not in p.stdout, "NO_COLOR gives plain output")
    p = run(["show", path("w3.npy"), "--tokens", "only two"])
    check(p.returncode == 2 and ("3 queries" in p.stderr or "3 keys" in p.stderr),
          "token count mismatch is a usage error: " + p.stderr)
    p = run(["show", path("missing.npy")])
    check(p.returncode == 1 and "missing.npy" in p.stderr, "missing file: " + p.stderr)

    # heatmap in three formats; labels as SVG text
    for ext in ("png", "svg", "pdf"):
        out = path("h." + ext)
        p = run(["heatmap", path("w3.npy"), "-o", out, "--x-tokens", "I like tea",
                 "--y-tokens", "you love coffee", "--title", "tutorial"])
        check(p.returncode == 0 and os.path.getsize(out) > 500, "heatmap ." + ext + p.stderr)
    head = open(path("h.png"), "rb").read(8)
    check(head == b"\x89PNG\r\n\x1a\n", "PNG signature")
    svg = open(path("h.svg"), encoding="utf-8").read()
    for t in ("like", "coffee", "tutorial", "0.47"):
        check(">%s</text>" % t in svg, "SVG has %s as text" % t)
    check(open(path("h.pdf"), "rb").read(4) == b"%PDF", "PDF signature")
    p = run(["heatmap", path("w3.npy"), "-o", path("h.gif")])
    check(p.returncode == 1 and ".png" in p.stderr, "unknown extension: " + p.stderr)
    p = run(["heatmap", path("w3.npy"), "-o", path("h.png"), "--map", "0,1"])
    check(p.returncode == 2, "map outside the weights")

    # uniform and one-hot maps, a grid
    rng = np.random.default_rng(5)
    u = np.full((2, 3, 7, 17), 1 / 17, dtype=np.float32)
    np.save(path("u.npy"), u)
    oh = np.zeros((1, 2, 5, 9), dtype=np.float64)
    for h in range(2):
        for i in range(5):
            oh[0, h, i, rng.integers(9)] = 1
    np.save(path("oh.npy"), oh)
    p = run(["heatmap", path("u.npy"), "--grid", "-o", path("grid.png")])
    check(p.returncode == 0, "grid " + p.stderr)

    p = run(["stats", path("u.npy")])
    check(p.returncode == 0 and "too uniform" in p.stdout, "uniform verdict: " + p.stdout)
    check("1.000 1.000 1.000" in p.stdout, "uniform entropy 1")
    p = run(["stats", path("u.npy"), "--strict"])
    check(p.returncode == 3, "--strict exits 3 on a verdict")
    p = run(["stats", path("oh.npy")])
    check("too concentrated" in p.stdout and "0.000 0.000 0.000" in p.stdout,
          "one-hot verdict: " + p.stdout)
    # a previous-token head is one-hot and healthy: no advice to rescale
    prev = np.zeros((6, 6), dtype=np.float32)
    prev[0, 0] = 1
    for i in range(1, 6):
        prev[i, i - 1] = 1
    np.save(path("prev.npy"), prev)
    p = run(["stats", path("prev.npy")])
    check(p.returncode == 0 and "sqrt" not in p.stdout and "scale them" not in p.stdout,
          "no rescaling advice on a one-hot map: " + p.stdout)

    # leakage under a causal mask, exactly: row i keeps 1/(i+1) on its
    # visible keys and 0.125 on key i+1
    L = 6
    lk = np.zeros((L, L))
    for i in range(L):
        lk[i, :i + 1] = 1 / (i + 1)
    for i in range(L - 1):
        lk[i, i + 1] = 0.125
    np.save(path("leak.npy"), lk)
    p = run(["stats", path("leak.npy"), "--causal", "top-left"])
    check("masked leakage: 5 masked positions carry weight (total 0.625, largest 0.125)"
          in p.stdout, "exact leakage: " + p.stdout)
    p = run(["stats", path("leak.npy")])
    check("masked leakage" not in p.stdout, "no mask, no leak")
    # the keep-mask convention from a file
    np.save(path("keep.npy"), np.tril(np.ones((L, L), dtype=np.uint8)))
    p = run(["stats", path("leak.npy"), "--mask", path("keep.npy")])
    check("5 masked positions" in p.stdout, "leakage with --mask: " + p.stdout)

    # compare: itself 0; a known pair
    p = run(["compare", path("w3.npy"), path("w3.npy")])
    check(p.returncode == 0 and "KL(A || B)    mean 0, max 0 over 3 rows" in p.stdout,
          "KL of a map with itself: " + p.stdout)
    a = np.array([[0.5, 0.5], [1.0, 0.0]])
    b = np.array([[0.25, 0.75], [0.5, 0.5]])
    np.save(path("a.npy"), a)
    np.save(path("b.npy"), b)
    p = run(["compare", path("a.npy"), path("b.npy"), "-o", path("diff.png")])
    want = (0.5 * math.log(4 / 3) + math.log(2)) / 2
    line = [l for l in p.stdout.splitlines() if l.startswith("KL")]
    got = float(line[0].split()[4].rstrip(",")) if line else float("nan")
    check(abs(got - want) < 1e-5, "known KL %g vs %g" % (got, want))
    check("max |A - B|   0.5" in p.stdout, "max abs diff")
    check(os.path.getsize(path("diff.png")) > 500, "difference picture")
    np.save(path("b3.npy"), np.zeros((3, 2)))
    p = run(["compare", path("a.npy"), path("b3.npy")])
    check(p.returncode == 1 and "shape" in p.stderr, "shape mismatch: " + p.stderr)

    # html
    p = run(["html", path("u.npy"), "--q-tokens", "a b c d e f g", "-o", path("v.html")])
    check(p.returncode == 0 and "2 batch entries x 3 heads" in p.stdout, "html " + p.stdout + p.stderr)
    page = open(path("v.html"), encoding="utf-8").read()
    check("<script src" not in page and "https://" not in page, "self-contained page")
    p = run(["html", path("u.npy"), "-o", path("v.html"), "--tokens", "x y"])
    check(p.returncode == 2, "html token mismatch")

sys.exit(summary("cli_viz"))

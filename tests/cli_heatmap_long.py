"""attn heatmap --q --k: the long-sequence map streamed through the flash
kernel's weight tiles. The saved block averages equal NumPy's block means
of the exact softmax (with a causal mask and Lq != Lk), blocks the mask
removes are reported, and at L = 16384 the process stays far below the
L x L matrix (1 GiB in f32).

usage: cli_heatmap_long.py PATH/TO/attn SOURCE_DIR
"""
import os
import resource
import sys
import tempfile

import numpy as np

from clitest import check, run, summary

sanitized = os.environ.get("ATTN_SANITIZED") == "1"


with tempfile.TemporaryDirectory() as d:
    def path(n):
        return os.path.join(d, n)

    # exact blocks: Lq = 300, Lk = 517, D = 17, two heads, map (0, 1)
    rng = np.random.default_rng(4)
    B, H, Lq, Lk, D = 1, 2, 300, 517, 17
    q = rng.standard_normal((B, H, Lq, D)).astype(np.float32)
    k = rng.standard_normal((B, H, Lk, D)).astype(np.float32)
    np.save(path("q.npy"), q)
    np.save(path("k.npy"), k)
    p = run(["heatmap", "--q", path("q.npy"), "--k", path("k.npy"),
             "--causal", "bottom-right", "--map", "0,1", "--max-cells", "64",
             "-o", path("long.png"), "--save-blocks", path("blocks.npy")])
    check(p.returncode == 0, "heatmap --q --k: " + p.stderr)
    check("blocks of 5 x 9" in p.stdout, "block size in the summary: " + p.stdout)
    s = (q[0, 1].astype(np.float64) @ k[0, 1].T.astype(np.float64)) / np.sqrt(D)
    i = np.arange(Lq)[:, None]
    j = np.arange(Lk)[None, :]
    s[j > i + Lk - Lq] = -np.inf
    w = np.exp(s - s.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    rows, cols = -(-Lq // 5), -(-Lk // 9)
    want = np.zeros((rows, cols))
    for r in range(rows):
        for c in range(cols):
            want[r, c] = w[5 * r:5 * r + 5, 9 * c:9 * c + 9].mean()
    if os.path.exists(path("blocks.npy")):
        got = np.load(path("blocks.npy"))
        check(got.shape == (rows, cols), "blocks shape %s" % (got.shape,))
        if got.shape == want.shape:
            # fully masked blocks may be skipped by the kernel: they read 0
            err = np.abs(got - want).max()
            check(err < 1e-5, "block averages off by %g" % err)
    check(os.path.getsize(path("long.png")) > 1000, "picture written")

    # memory: L = 16384 (2048 under the sanitizers) never holds L x L
    L = 2048 if sanitized else 16384
    x = rng.standard_normal((L, 64)).astype(np.float32)
    np.save(path("ql.npy"), x)
    np.save(path("kl.npy"), x)
    p = run(["heatmap", "--q", path("ql.npy"), "--k", path("kl.npy"),
             "--causal", "top-left", "-o", path("l.png")])
    check(p.returncode == 0, "L = %d: %s" % (L, p.stderr))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    if not sanitized:
        check(peak < 256 << 20, "peak memory %.0f MiB at L = %d (L x L f32 is %.0f MiB)"
              % (peak / 2**20, L, L * L * 4 / 2**20))
    print("L = %d: peak resident memory %.1f MiB" % (L, peak / 2**20))

    # robust colour scale: a causal map's first rows (a few keys each)
    # would set the scale and leave the rest one colour
    p = run(["heatmap", "--q", path("q.npy"), "--k", path("q.npy"), "--causal",
             "top-left", "--max-cells", "64", "-o", path("c.svg"),
             "--save-blocks", path("cb.npy")])
    check(p.returncode == 0, "causal --q --k: " + p.stderr)
    if p.returncode == 0:
        svg = open(path("c.svg")).read()
        blocks = np.load(path("cb.npy"))
        vis = blocks[np.tril(np.ones(blocks.shape, bool))]
        p99 = np.sort(vis)[int(0.99 * (vis.size - 1))]
        check(">clipped at the 99th percentile, %.3g (largest %.3g)</text>"
              % (p99, vis.max()) in svg, "colour bar says the scale is clipped")
    p = run(["heatmap", "--q", path("q.npy"), "--k", path("q.npy"), "--causal",
             "top-left", "--vmin", "0", "--vmax", "1", "-o", path("c1.svg")])
    check(p.returncode == 0 and "percentile" not in open(path("c1.svg")).read(),
          "--vmin/--vmax replace the robust scale")
    p = run(["heatmap", "--help"])
    check(p.stdout.count("--vmin V --vmax V") == 2, "both usage forms list --vmin/--vmax")

    p = run(["heatmap", "--q", path("q.npy"), "-o", path("x.png")])
    check(p.returncode == 2, "--q without --k is a usage error")

sys.exit(summary("cli_heatmap_long"))

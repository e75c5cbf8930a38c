"""Rough edges of the command line, one check each: an option given twice is
refused (except the lists generate --input and embed --text), attn attend
--help shows every form, compare names both files' shapes, attn train date
reports tokens a second and the time left, and the HTML viewer's rotated
key labels stay clear of the map and of the "key" caption (measured in
headless Chromium).

usage: cli_ux.py PATH/TO/attn SOURCE_DIR
"""
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

from clitest import check, run, summary

D = tempfile.mkdtemp(prefix="attn_ux_")


def path(name):
    return os.path.join(D, name)


def save(name, a):
    np.save(path(name), a)
    return path(name)


def repeats():
    q = save("q.npy", np.ones((3, 4), np.float32))
    for args, opt in ((["attend", "m.bin", "--text", "a", "--text", "b"], "--text"),
                      (["sdpa", "--q", q, "--k", q, "--v", q, "--out", path("o.npy"),
                        "--out", path("o2.npy")], "--out"),
                      (["heatmap", q, "-o", path("x.png"), "--title", "a",
                        "--title", "b"], "--title"),
                      (["stats", q, "--causal", "top-left", "--causal",
                        "bottom-right"], "--causal")):
        p = run(args)
        check(p.returncode == 2 and ("%s is given twice" % opt) in p.stderr,
              "%s twice is refused: %s" % (opt, p.stderr))
    check(not os.path.exists(path("o.npy")) and not os.path.exists(path("o2.npy")),
          "nothing written when refused")
    # the lists stay lists
    p = run(["generate", "nowhere.bin", "--input", "1+1=", "--input", "2+2="])
    check("given twice" not in p.stderr, "generate --input repeats: " + p.stderr)
    p = run(["embed", path("nodir"), "--text", "a", "--text", "b"])
    check("given twice" not in p.stderr, "embed --text repeats: " + p.stderr)


def attend_help():
    p = run(["attend", "--help"])
    check(p.returncode == 0 and "attn attend MODEL.bin --input \"3 1 4 1 5\"" in p.stdout
          and "attn attend MODEL.bin --input TEXT --out DIR" in p.stdout
          and "attn attend DIR --text TEXT" in p.stdout,
          "attend --help shows the three forms: " + p.stdout)


def compare():
    a = save("a.npy", np.full((3, 3), 1 / 3, np.float32))
    b = save("b.npy", np.full((2, 4, 7, 7), 1 / 7, np.float32))
    p = run(["compare", a, b])
    check(p.returncode == 1 and "A has shape (3, 3) (query, key) but B has "
          "(2, 4, 7, 7) (batch, head, query, key)" in p.stderr,
          "compare names both shapes: " + p.stderr)
    p = run(["compare", b, b])
    check(p.returncode == 0 and "shape (2, 4, 7, 7) (batch, head, query, key)"
          in p.stdout, "compare prints the file's shape: " + p.stdout)


def train_progress():
    p = run(["train", "date", "--layers", "1", "--d-model", "16", "--heads", "2",
             "--ff", "16", "--steps", "20", "--eval", "5", "--save", path("d.bin")])
    lines = [l for l in p.stderr.splitlines() if l.startswith("step ")]
    check(p.returncode == 0 and lines and
          all(re.search(r" \d+ tok/s .*ETA \d+s$", l) for l in lines),
          "train date reports tok/s and ETA: " + p.stderr)


MEASURE = """<script>
window.addEventListener('load', () => setTimeout(() => {
  const map = document.getElementById('heat').getBoundingClientRect();
  const cap = document.querySelector('#hwrap .axis').getBoundingClientRect();
  let gap = 1e9, below = 1e9, seen = 0;
  for (const d of document.querySelectorAll('#hcols div')) {
    const r = d.getBoundingClientRect();
    if (r.height === 0) continue;
    seen++;
    gap = Math.min(gap, r.top - map.bottom);
    below = Math.min(below, cap.top - r.bottom);
  }
  const m = document.createElement('div');
  m.id = 'measure';
  m.textContent = 'seen=' + seen + ' gap=' + gap + ' below=' + below;
  document.body.appendChild(m);
}, 200));
</script>
</body>"""


def html_layout():
    w = np.full((1, 2, 6, 6), 1 / 6, np.float32)
    f = save("h.npy", w)
    page = path("h.html")
    p = run(["html", f, "--tokens", "The quick brownish fox jumped over", "-o", page])
    check(p.returncode == 0, "html: " + p.stderr)
    text = open(page, encoding="utf-8").read().replace("</body>", MEASURE, 1)
    probe = path("probe.html")
    with open(probe, "w", encoding="utf-8") as out:
        out.write(text)
    r = subprocess.run(["timeout", "120", "chromium", "--headless", "--no-sandbox",
                        "--disable-gpu", "--virtual-time-budget=3000",
                        "--window-size=1000,600", "--dump-dom", "file://" + probe],
                       capture_output=True, text=True)
    m = re.search(r"seen=(\d+) gap=(-?[\d.e+]+) below=(-?[\d.e+]+)", r.stdout)
    check(m is not None, "chromium measured the viewer: %s" % r.stderr[-500:])
    if m:
        seen, gap, below = int(m.group(1)), float(m.group(2)), float(m.group(3))
        check(seen == 6, "six key labels drawn, got %d" % seen)
        check(gap >= 2, "key labels clear of the map (gap %.1f px)" % gap)
        check(below >= 0, "the key caption under the labels (%.1f px)" % below)


def dtypes():
    """One rule, PyTorch's: q, k, v share a dtype (mixed ones refused),
    outputs come in it (promoted with --compute-dtype); lse is f32."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 4))
    h = save("h16.npy", x.astype(np.float16))
    f = save("f32.npy", x.astype(np.float32))
    d = save("f64.npy", x)
    p = run(["sdpa", "--q", h, "--k", f, "--v", f, "--out", path("m.npy")])
    check(p.returncode == 2 and "q is f16, k is f32, v is f32" in p.stderr,
          "mixed f16/f32 refused: " + p.stderr)
    p = run(["sdpa", "--q", f, "--k", d, "--v", f, "--out", path("m.npy")])
    check(p.returncode == 2 and "must share one dtype" in p.stderr,
          "mixed f32/f64 refused: " + p.stderr)
    for src, want, extra in ((h, np.float16, []), (f, np.float32, []),
                             (d, np.float64, []),
                             (f, np.float32, ["--compute-dtype", "f16"]),
                             (h, np.float32, ["--compute-dtype", "bf16"])):
        p = run(["sdpa", "--q", src, "--k", src, "--v", src, "--out", path("o.npy"),
                 "--weights", path("w.npy"), "--lse", path("l.npy")] + extra)
        ok = p.returncode == 0
        check(ok and np.load(path("o.npy")).dtype == want and
              np.load(path("w.npy")).dtype == want and
              np.load(path("l.npy")).dtype == np.float32,
              "%s inputs %s: outputs %s: %s" % (np.load(src).dtype, extra,
                                                np.dtype(want), p.stderr))
        for name in ("o.npy", "w.npy", "l.npy"):
            if os.path.exists(path(name)):
                os.remove(path(name))


repeats()
dtypes()
attend_help()
compare()
train_progress()
html_layout()
rc = summary("cli_ux")
if rc == 0:
    shutil.rmtree(D)
raise SystemExit(rc)

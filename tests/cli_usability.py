"""What a new user trips over (issue 11), one check per defect: float masks
are additive as in PyTorch, encoder weights can be drawn and checked,
outputs never overwrite inputs, messages name what is missing, ...

usage: cli_usability.py PATH/TO/attn SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from clitest import ATTN, SRC, check, run, summary

D = tempfile.mkdtemp(prefix="attn_usability_")


def path(name):
    return os.path.join(D, name)


def save(name, a):
    np.save(path(name), a)
    return path(name)


def float_masks():
    """A PyTorch-style additive mask (0 / -inf) is added, never inverted."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((5, 4)).astype(np.float32) for _ in range(3))
    keep = np.tril(np.ones((5, 5), bool))
    add = np.where(keep, 0.0, -np.inf).astype(np.float32)
    base = ["sdpa", "--q", save("q.npy", q), "--k", save("k.npy", k),
            "--v", save("v.npy", v)]
    p = run(base + ["--out", path("o_bool.npy"), "--mask", save("keep.npy", keep)])
    check(p.returncode == 0, "bool mask: " + p.stderr)
    p = run(base + ["--out", path("o_add.npy"), "--mask", save("add.npy", add)])
    check(p.returncode == 0, "float mask: " + p.stderr)
    p = run(base + ["--out", path("o_bias.npy"), "--bias", path("add.npy")])
    check(p.returncode == 0, "bias: " + p.stderr)
    if p.returncode == 0:
        a, b, c = (np.load(path(n)) for n in ("o_bool.npy", "o_add.npy", "o_bias.npy"))
        check(np.allclose(a, b, atol=1e-6) and np.allclose(b, c, atol=1e-6),
              "a float 0/-inf mask is the bias, the same as the bool keep mask")
    # an explicit convention reads 0/1 floats; -inf under it is refused
    p = run(base + ["--out", path("o_f01.npy"), "--mask",
                    save("keep01.npy", keep.astype(np.float32)),
                    "--mask-convention", "keep"])
    check(p.returncode == 0 and np.allclose(np.load(path("o_f01.npy")),
                                            np.load(path("o_bool.npy")), atol=1e-6),
          "float 0/1 mask with --mask-convention keep: " + p.stderr)
    p = run(base + ["--out", path("o_x.npy"), "--mask", path("add.npy"),
                    "--mask-convention", "keep"])
    check(p.returncode == 2 and "only 0 and 1" in p.stderr,
          "float -inf mask under --mask-convention is refused: " + p.stderr)
    p = run(base + ["--out", path("o_x.npy"), "--mask", path("add.npy"),
                    "--bias", path("add.npy")])
    check(p.returncode == 2 and "additive" in p.stderr,
          "float mask and --bias together are refused: " + p.stderr)


def encoder_weights():
    """attn encoder --weights (layer, batch, head, L, L) is drawn, checked,
    shown and viewed, with the axes named layer, batch, head."""
    rng = np.random.default_rng(2)
    x = save("x.npy", rng.standard_normal((2, 5, 8)).astype(np.float32))
    w = path("enc_w.npy")
    p = run(["encoder", "--x", x, "--out", path("y.npy"), "--init-seed", "3",
             "--layers", "2", "--heads", "2", "--ff", "16", "--weights", w])
    check(p.returncode == 0, "encoder --weights: " + p.stderr)
    if p.returncode:
        return
    check(np.load(w).shape == (2, 2, 2, 5, 5), "encoder weights are rank 5")
    p = run(["heatmap", w, "--grid", "-o", path("enc.svg")])
    check(p.returncode == 0, "heatmap --grid of encoder weights: " + p.stderr)
    if p.returncode == 0:
        svg = open(path("enc.svg")).read()
        check(">layer 1 batch 0 head 1</text>" in svg,
              "grid panels titled layer, batch, head")
    p = run(["heatmap", w, "--map", "1,1,0", "-o", path("enc1.png")])
    check(p.returncode == 0, "heatmap --map L,B,H: " + p.stderr)
    p = run(["heatmap", w, "--map", "1,0", "-o", path("enc1.png")])
    check(p.returncode == 2 and "L,B,H" in p.stderr, "--map B,H on rank 5: " + p.stderr)
    p = run(["stats", w])
    check(p.returncode == 0 and "layer 1 batch 1 head 1" in p.stdout and
          "(layer, batch, head, query, key)" in p.stdout,
          "stats of encoder weights names the axes: " + p.stdout + p.stderr)
    p = run(["show", w, "--map", "0,1,1", "--color", "plain"])
    check(p.returncode == 0, "show of encoder weights: " + p.stderr)
    p = run(["html", w, "--batch", "1", "-o", path("enc.html")])
    check(p.returncode == 0 and "2 layers x 2 heads" in p.stdout,
          "html of encoder weights: " + p.stdout + p.stderr)
    # rank-4 attention weights: the first axis is the batch
    w4 = save("w4.npy", np.full((2, 3, 4, 4), 0.25, np.float32))
    p = run(["heatmap", w4, "--grid", "-o", path("w4.svg")])
    check(p.returncode == 0 and ">batch 1 head 2</text>" in open(path("w4.svg")).read(),
          "sdpa weights' grid says batch, not layer")
    p = run(["stats", w4])
    check("batch 1 head 2" in p.stdout, "stats names batch and head: " + p.stdout)
    bad = save("w6.npy", np.zeros((1, 1, 1, 1, 2, 2), np.float32))
    p = run(["stats", bad])
    check(p.returncode == 2 and "(layer, batch, head, Lq, Lk)" in p.stderr and
          "(L, D)" not in p.stderr, "rank-6 weights: message names the axes: " + p.stderr)


def escaped_messages():
    """Arguments quoted in messages reach the terminal escaped."""
    p = run(["sdpa", "--q\x1b[2J"])
    check(p.returncode == 2 and "\\x1b[2J" in p.stderr and "\x1b" not in p.stderr,
          "usage error escapes control bytes: %r" % p.stderr)
    odd = save("odd\x1b[2J.npy", np.ones((2, 2), bool))
    p = run(["sdpa", "--q", odd, "--k", odd, "--v", odd, "--out", path("o.npy")])
    check(p.returncode == 1 and "odd\\x1b[2J.npy" in p.stderr and "\x1b" not in p.stderr,
          "a path quoted in a message is escaped: %r" % p.stderr)
    p = run(["no\x07such"])
    check("\\x07" in p.stderr and "\x07" not in p.stderr,
          "unknown command escaped: %r" % p.stderr)


def helps():
    """--help lists only what the command uses; those options are refused."""
    for cmd, absent in (("stats", ("--dropout", "--impl", "--threads", "--scale", "--seed")),
                        ("show", ("--dropout", "--impl", "--threads", "--scale", "--seed")),
                        ("heatmap", ("--dropout", "--impl", "--seed"))):
        h = run([cmd, "--help"]).stdout
        check("--causal" in h and not any(a + " " in h for a in absent),
              "%s --help lists no option without effect" % cmd)
        p = run([cmd, "w.npy", absent[0], "0.1"])
        check(p.returncode == 2 and "no effect" in p.stderr,
              "%s %s is refused: %s" % (cmd, absent[0], p.stderr))
    h = run(["additive", "--help"]).stdout
    check("default 1\n" in h and "1/sqrt" not in h, "additive --help: one default scale")


def show_terminal():
    """attn show: escapes only on a terminal, never with NO_COLOR."""
    import pty
    import subprocess
    w = save("w3.npy", np.full((3, 3), 1 / 3, np.float32))
    env = dict(os.environ)
    env.pop("NO_COLOR", None)
    p = subprocess.run([ATTN, "show", w], capture_output=True, text=True, env=env)
    check(p.returncode == 0 and "\x1b" not in p.stdout, "show into a pipe: no escapes")

    def on_pty(extra):
        m, s_ = pty.openpty()
        e = dict(env, **extra)
        r = subprocess.run([ATTN, "show", w], stdout=s_, stderr=subprocess.PIPE, env=e)
        os.close(s_)
        out = b""
        while True:
            try:
                chunk = os.read(m, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        os.close(m)
        return r.returncode, out

    rc, out = on_pty({})
    check(rc == 0 and b"\x1b[" in out, "show on a terminal: colour escapes")
    rc, out = on_pty({"NO_COLOR": "1"})
    check(rc == 0 and b"\x1b" not in out, "NO_COLOR on a terminal: no escapes")
    # labels longer than one character: numbers over the columns, a legend
    p = run(["show", w, "--tokens", "The cat sat", "--color", "plain"])
    check("keys:  0 The  1 cat  2 sat" in p.stdout and "\n     T" not in p.stdout,
          "key labels in a legend: " + p.stdout)


def messages():
    """Messages in the CLI's own words, naming what is missing."""
    q = save("q5.npy", np.ones((5, 4), np.float32))
    p = run(["sdpa", "--q", q, "--v", q])
    check(p.returncode == 2 and "missing --k and --out" in p.stderr,
          "the missing options are named: " + p.stderr)
    p = run(["sdpa", "--q", q, "--k", q, "--v", q, "--out", path("o.npy"),
             "--compute-dtype", "f64"])
    check(p.returncode == 2 and "--impl ref" in p.stderr and "ATTN_IMPL" not in p.stderr,
          "f64 compute in the CLI's words: " + p.stderr)
    p = run(["sdpa-backward", "--q", q, "--k", q, "--v", q, "--dout", q, "--dq",
             path("a.npy"), "--dk", path("b.npy"), "--dv", path("c.npy"),
             "--compute-dtype", "f64"])
    check(p.returncode == 2 and "--impl ref" in p.stderr, "backward f64: " + p.stderr)
    b = save("b.npy", np.ones((5, 4), bool))
    p = run(["sdpa", "--q", b, "--k", q, "--v", q, "--out", path("o.npy")])
    check(p.returncode == 1 and "dtype bool" in p.stderr and "u8" not in p.stderr,
          "a bool file is called bool: " + p.stderr)
    p = run(["stats", save("i.npy", np.ones((2, 2), np.int32))])
    check("dtype int32" in p.stderr, "an int32 file is called int32: " + p.stderr)
    p = run(["--version"])
    check(p.returncode == 0 and p.stdout.startswith("attn "), "attn --version")
    blas_core()


def blas_core():
    """Where OpenBLAS took this CPU for an older one (Debian's 0.3.21 on
    some virtual Xeons: Prescott), the command asks for the kernels of the
    CPU's width; a core the user names is kept and called out."""
    with open("/proc/cpuinfo") as f:
        flags = next((set(l.split(":", 1)[1].split()) for l in f
                      if l.startswith("flags")), set())
    want = ("SkylakeX" if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags
            else "Haswell" if {"avx2", "fma"} <= flags else None)
    wide = {"SkylakeX": ("SkylakeX", "Cooperlake", "SapphireRapids"),
            "Haswell": ("Haswell", "Zen", "SkylakeX", "Cooperlake",
                        "SapphireRapids")}
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    p = subprocess.run([ATTN, "version"], env=env, capture_output=True,
                       text=True)
    line = next((l for l in p.stdout.splitlines() if l.startswith("blas: ")), "")
    check(line.startswith("blas: OpenBLAS core "), "attn version names the "
          "BLAS core: " + p.stdout)
    core = line.split()[3] if len(line.split()) > 3 else ""
    print("blas core on this CPU (flags want %s): %s" % (want, line))
    if want:
        check(core in wide[want] and "below this CPU" not in line,
              "OpenBLAS runs %s kernels on a CPU for %s: %s" % (core, want, line))
    p = run(["version"], env={"OPENBLAS_CORETYPE": "Prescott"})
    check("core Prescott (OPENBLAS_CORETYPE 'Prescott')" in p.stdout,
          "a core the user names is kept: " + p.stdout)
    if want:
        check("below this CPU (OPENBLAS_CORETYPE=%s fits it)" % want in p.stdout,
              "and called out: " + p.stdout)


def trained_models():
    """eval of another task's format, attend on an untrained length, and
    the sum of add in ordinary digits."""
    r, a = path("r.bin"), path("a.bin")
    p1 = run(["train", "reverse", "--steps", "5", "--save", r])
    p2 = run(["train", "add", "--steps", "5", "--save", a])
    check(p1.returncode == 0 and p2.returncode == 0, "train: " + p1.stderr + p2.stderr)
    p = run(["eval", r, "add"])
    check(p.returncode == 2 and "trained on reverse" in p.stderr and
          "length 33" not in p.stderr, "eval of add on a reverse model: " + p.stderr)
    p = run(["attend", r, "--input", "3 1 4 1 5"])
    check(p.returncode == 0 and "warning" in p.stderr and "16..16 tokens" in p.stderr,
          "attend warns about an untrained length: " + p.stderr)
    p = run(["attend", r, "--input", "3 1 4 1 5 9 2 6 5 3 5 8 9 7 9 3"])
    check(p.returncode == 0 and "warning" not in p.stderr, "trained length: no warning")
    p = run(["attend", a, "--input", "7 8 9 + 5 4 0", "--out", path("maps")])
    check(p.returncode == 0 and "987 + 45 = 1032; the model says " in p.stdout,
          "add prints the sum in ordinary digits: " + p.stdout)
    if p.returncode == 0:
        check(np.load(path("maps/weights.npy")).shape == (2, 1, 4, 7, 7),
              "attend writes (layer, batch, head, L, L)")
        p = run(["heatmap", path("maps/weights.npy"), "--grid", "-o", path("m.svg")])
        check(p.returncode == 0 and ">layer 1 head 3</text>" in open(path("m.svg")).read(),
              "attend weights drawn with layer titles")


def outputs_distinct():
    """An output is never an input or another output (by inode where the
    file exists: another spelling or a hard link is the same file)."""
    q = save("qo.npy", np.ones((3, 4), np.float32))
    before = open(q, "rb").read()
    os.link(q, path("qo_link.npy"))
    q3 = save("q3.npy", np.ones((1, 3, 4), np.float32))
    s1 = save("s1.npy", np.zeros(1))
    i1 = save("i1.npy", np.zeros(3, np.int64))
    i2 = save("i2.npy", np.zeros(3, np.int64))
    c1 = save("c1.npy", np.array([0, 3], np.int64))
    small = [open(f, "rb").read() for f in (s1, i1, i2, c1)]
    cases = [
        (["sdpa", "--q", q, "--k", q, "--v", q, "--out", path("o.npy"), "--weights", q],
         "overwrite the input"),
        (["sdpa", "--q", q, "--k", q, "--v", q, "--out", path("qo_link.npy")],
         "overwrite the input"),
        (["sdpa", "--q", q, "--k", q, "--v", q, "--out", path("n.npy"),
          "--lse", os.path.join(D, ".", "n.npy")], "the same file"),
        (["sdpa-backward", "--q", q, "--k", q, "--v", q, "--dout", q, "--dq",
          path("g.npy"), "--dk", path("g.npy"), "--dv", path("h.npy")], "the same file"),
        (["mha", "--query", q, "--out", q, "--init-seed", "1", "--heads", "1"],
         "overwrite the input"),
        (["encoder", "--x", q, "--out", path("y.npy"), "--weights", path("y.npy"),
          "--init-seed", "1"], "the same file"),
        (["heatmap", q, "-o", q], "overwrite the input"),
        # the score-modifier and document files are inputs too
        (["sdpa", "--q", q3, "--k", q3, "--v", q3, "--out", s1, "--sinks", s1],
         "is also the input --sinks"),
        (["sdpa", "--q", q3, "--k", q3, "--v", q3, "--out", s1, "--alibi-slopes",
          s1], "is also the input --alibi-slopes"),
        (["sdpa", "--q", q3, "--k", q3, "--v", q3, "--out", path("w.npy"),
          "--lse", i1, "--doc-ids", i1], "is also the input --doc-ids"),
        (["sdpa", "--q", q3, "--k", q3, "--v", q3, "--out", i1, "--doc-ids",
          i1 + "," + i2], "is also the input --doc-ids"),
        (["sdpa", "--q", q3, "--k", q3, "--v", q3, "--out", i2, "--doc-ids",
          i1 + "," + i2], "is also the input --doc-ids (key ids)"),
        (["sdpa", "--q", q3, "--k", q3, "--v", q3, "--out", c1, "--cu-seqlens",
          c1], "is also the input --cu-seqlens"),
        (["sdpa", "--q", q3, "--k", q3, "--v", q3, "--out", c1, "--cu-seqlens",
          "0,3", "--cu-seqlens-k", c1], "is also the input --cu-seqlens-k"),
        (["sdpa-backward", "--q", q3, "--k", q3, "--v", q3, "--dout", q3, "--dq",
          path("g.npy"), "--dk", path("g2.npy"), "--dv", path("g3.npy"),
          "--sinks", s1, "--dsinks", s1], "is also the input --sinks"),
        (["mha", "--query", q3, "--out", c1, "--init-seed", "1", "--heads", "1",
          "--cu-seqlens", c1], "is also the input --cu-seqlens"),
        (["heatmap", "--q", q3, "--k", q3, "-o", s1, "--sinks", s1],
         "is also the input --sinks"),
        (["compare", q, q, "-o", q], "overwrite the input"),
        (["html", q, "-o", q], "overwrite the input"),
    ]
    for args, words in cases:
        p = run(args)
        check(p.returncode == 2 and words in p.stderr,
              "%s refused: %s" % (" ".join(args[:1]), p.stderr))
    check(open(q, "rb").read() == before, "the input is untouched")
    check([open(f, "rb").read() for f in (s1, i1, i2, c1)] == small,
          "the score-modifier inputs are untouched")
    check(not os.path.exists(path("n.npy")) and not os.path.exists(path("g.npy")),
          "nothing written on refusal")


def readme():
    """The README's examples run as written: real PyTorch refuses attn_mask
    with is_causal, mha.bin is made before it is used, an additive encoder
    is not given heads (and the CLI warns when it is)."""
    import re
    import glob
    text = "".join(open(p).read() for p in [os.path.join(SRC, "README.md")] +
                   sorted(glob.glob(os.path.join(SRC, "docs", "*.md"))))
    torch_calls = re.findall(r"torch\.nn\.functional\.scaled_dot_product_attention\(([^)]*)\)", text)
    check(torch_calls and not any("attn_mask" in c and "is_causal=True" in c
                                  for c in torch_calls),
          "README: no PyTorch call with attn_mask and is_causal=True")
    made, used = text.find("--save-params mha.bin"), text.find("--params mha.bin")
    check(0 <= made < used, "README: mha.bin is made before it is used")
    for m in re.finditer(r"attn encoder (?:[^\n]*\\\n)*[^\n]*", text):
        cmd = re.sub(r"#[^\n]*", "", m.group(0))
        if "--attention additive" in cmd:
            check("--heads" not in cmd, "README: additive encoder without --heads")
    x = save("xe.npy", np.ones((1, 3, 8), np.float32))
    p = run(["encoder", "--x", x, "--out", path("ye.npy"), "--init-seed", "1",
             "--heads", "4", "--ff", "8", "--attention", "additive"])
    check(p.returncode == 0 and "no effect" in p.stderr, "encoder warns: " + p.stderr)
    p = run(["encoder", "--x", x, "--out", path("ye.npy"), "--init-seed", "1",
             "--heads", "4", "--ff", "8"])
    check(p.returncode == 0 and "warning" not in p.stderr, "dot encoder: no warning")


def make_packages():
    """make demo installs what the demo needs; make test adds the rest."""
    import subprocess
    def pkgs(target):
        p = subprocess.run(["make", "-n", target, "BUILD=" + os.path.dirname(ATTN)],
                           capture_output=True, text=True, cwd=SRC)
        return set(w for line in p.stdout.splitlines() if "for p in" in line
                   for w in line.split("for p in", 1)[1].split(";")[0].split())
    demo, test = pkgs("demo"), pkgs("test")
    check("libcairo2-dev" in demo and not demo & {"chromium", "python3-pytest",
                                                  "python3-numpy"},
          "make demo installs only the build's packages: %s" % sorted(demo))
    check({"chromium", "python3-pytest", "python3-numpy"} <= test,
          "make test installs the tests' packages: %s" % sorted(test))


def main():
    try:
        make_packages()
        readme()
        outputs_distinct()
        messages()
        trained_models()
        show_terminal()
        helps()
        escaped_messages()
        float_masks()
        encoder_weights()
    finally:
        shutil.rmtree(D, ignore_errors=True)
    return summary("cli_usability")


if __name__ == "__main__":
    sys.exit(main())

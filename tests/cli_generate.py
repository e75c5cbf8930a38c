"""attn train date / --model encdec|decoder, attn generate, attn eval and
attn attend for generation models, end to end on tiny models: the output
lines (exact match), --until + --resume equal to the uninterrupted run
byte for byte for both model kinds, generate with greedy / beam / sampling
/ --no-cache / --json, batches of inputs of different lengths, the
cross-attention files of attend (rows sum to 1, shapes, PNGs), and the
failures: an unknown character, an input too long, a checkpoint of the
wrong kind.

usage: cli_generate.py PATH/TO/attn SOURCE_DIR
"""
import json
import os
import re
import sys
import tempfile

import numpy as np

import clitest
from clitest import check, summary


def run(*args):
    return clitest.run(args, timeout=500)


def same(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


TINY = ["--layers", "1", "--d-model", "16", "--heads", "2", "--ff", "32",
        "--batch", "16", "--steps", "30", "--eval", "20", "--save-every", "10"]

with tempfile.TemporaryDirectory() as d:
    a, b, c, e = (os.path.join(d, n) for n in ("a.bin", "b.bin", "c.bin", "e.bin"))
    p = run("train", "date", *TINY, "--save", a)
    check(p.returncode == 0, "train date exit %d: %s" % (p.returncode, p.stderr))
    check(re.search(r"^exact match: [01]\.\d{4}$", p.stdout, re.M) is not None,
          "train prints the exact match: " + p.stdout)
    # --until then --resume: byte for byte the uninterrupted checkpoint
    for kind, task in (("encdec", "date"), ("decoder", "add")):
        p1 = run("train", task, "--model", kind, *TINY, "--save", b, "--eval", "0")
        p2 = run("train", task, "--model", kind, *TINY, "--save", c, "--eval", "0",
                 "--until", "17")
        p3 = run("train", "--resume", c, "--save", c, "--eval", "0")
        check(p1.returncode == 0 and p2.returncode == 0 and p3.returncode == 0,
              "%s runs: %s %s %s" % (kind, p1.stderr, p2.stderr, p3.stderr))
        check(same(b, c), "%s: --until + --resume differs from one run" % kind)
    # generate: one line per input, a batch of different lengths
    inputs = ["tue 3 march 2026", "03/03/26", "march 3, 2026", "3.3.2026"]
    args = ["generate", a]
    for s in inputs:
        args += ["--input", s]
    p = run(*args)
    lines = p.stdout.splitlines()
    check(p.returncode == 0 and len(lines) == 4, "generate: %s %s" % (p.stdout, p.stderr))
    check(all(re.fullmatch(r"[-0-9]*", x) for x in lines), "outputs: %r" % lines)
    p1 = run(*args, "--no-cache")
    check(p1.stdout == p.stdout, "--no-cache gives other tokens")
    # each input alone gives what it gives in the batch
    for i, s in enumerate(inputs):
        q = run("generate", a, "--input", s)
        check(q.stdout.strip() == lines[i], "alone %r: %r vs %r" % (s, q.stdout, lines[i]))
    p = run("generate", a, "--input", inputs[0], "--beam", "1", "--json")
    j = json.loads(p.stdout)
    check(j["outputs"][0]["output"] == lines[0] and j["decoding"] == "greedy",
          "json: %s" % p.stdout)
    p = run("generate", a, "--input", inputs[0], "--beam", "3", "--json")
    j = json.loads(p.stdout)
    check(p.returncode == 0 and j["beam"] == 3 and "score" in j["outputs"][0],
          "beam json: %s %s" % (p.stdout, p.stderr))
    s1 = run("generate", a, "--input", inputs[1], "--sample", "--seed", "7",
             "--temperature", "1.5", "--top-k", "5", "--top-p", "0.9")
    s2 = run("generate", a, "--input", inputs[1], "--sample", "--seed", "7",
             "--temperature", "1.5", "--top-k", "5", "--top-p", "0.9",
             "--threads", "2")
    check(s1.returncode == 0 and s1.stdout == s2.stdout, "sampling: %r %r %s" %
          (s1.stdout, s2.stdout, s1.stderr))
    # errors
    p = run("generate", a, "--input", "march 3, 2026!")
    check(p.returncode == 1 and "'!' at position 13" in p.stderr, p.stderr)
    p = run("generate", a, "--input", "march \x01")
    check(p.returncode == 1 and "\\x01" in p.stderr, p.stderr)
    p = run("generate", a, "--input", "wednesday, september 30, 2026 xx")
    check(p.returncode == 1 and "at most 29" in p.stderr, p.stderr)
    p = run("train", "reverse", "--length", "4", "--layers", "1", "--d-model",
            "8", "--heads", "2", "--ff", "8", "--steps", "2", "--eval", "0",
            "--save", e)
    p = run("generate", e, "--input", "123")
    check(p.returncode == 1 and "encoder tagger checkpoint" in p.stderr, p.stderr)
    p = run("generate", a, "--input", "x", "--sample", "--beam", "2")
    check(p.returncode == 2, "sample + beam: %d" % p.returncode)
    # eval
    p = run("eval", a, "--count", "30")
    check(p.returncode == 0 and re.search(r"^exact match: [01]\.\d{4}$", p.stdout, re.M)
          is not None, "eval: %s %s" % (p.stdout, p.stderr))
    p = run("eval", a, "reverse")
    check(p.returncode == 1 and "trained on date" in p.stderr, p.stderr)
    # attend: cross-attention maps and the alignment picture
    out = os.path.join(d, "att")
    p = run("attend", a, "--input", "march 3, 2026", "--out", out, "--count", "20")
    check(p.returncode == 0, "attend: %s %s" % (p.stdout, p.stderr))
    check("best head" in p.stdout, p.stdout)
    w = np.load(os.path.join(out, "cross_weights.npy"))
    n = min(len(lines[2]) + 1, 11)
    check(w.shape == (1, 2, n, 13), "cross weights shape %s" % (w.shape,))
    check(np.allclose(w.sum(-1), 1, atol=1e-5), "rows sum to 1")
    for f in ("alignment.png", "cross_attention.png", "cross_layer0_head1.png",
              "cross_layer0_head1.npy"):
        path = os.path.join(out, f)
        check(os.path.exists(path) and os.path.getsize(path) > 0, f)
    with open(os.path.join(out, "alignment.png"), "rb") as f:
        check(f.read(8) == b"\x89PNG\r\n\x1a\n", "alignment.png is a PNG")
    # decoder-only: attend refuses, generate reads '123+456='
    p = run("generate", b, "--input", "123+456=", "--input", "7+8")
    check(p.returncode == 0 and len(p.stdout.splitlines()) == 2, p.stdout + p.stderr)
    p = run("attend", b, "--input", "1+2", "--out", out)
    check(p.returncode == 1 and "no cross-attention" in p.stderr, p.stderr)

sys.exit(summary("cli_generate"))

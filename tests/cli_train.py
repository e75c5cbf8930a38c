"""attn train / eval / attend end to end on a tiny model: the output lines,
--until + --resume equal to the uninterrupted run byte for byte, 1 and 2
threads byte for byte, the attention maps written by attend (rows sum to 1,
shapes, PNGs), and the failures (missing --save, unknown task, options that
a resumed run cannot change, a truncated checkpoint, bad input tokens).

usage: cli_train.py PATH/TO/attn SOURCE_DIR
"""
import os
import re
import sys
import tempfile

import numpy as np

import clitest
from clitest import check, summary


def run(*args):
    return clitest.run(args, timeout=300)


def same(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


TINY = ["reverse", "--length", "6", "--min-len", "4", "--layers", "2",
        "--d-model", "16", "--heads", "2", "--ff", "24", "--steps", "40",
        "--batch", "16", "--eval", "200", "--save-every", "15"]

with tempfile.TemporaryDirectory() as d:
    a, b, c = (os.path.join(d, n) for n in ("a.bin", "b.bin", "c.bin"))
    p = run("train", *TINY, "--save", a)
    check(p.returncode == 0, "train exit %d: %s" % (p.returncode, p.stderr))
    check(re.search(r"^token accuracy: [01]\.\d{4}$", p.stdout, re.M) is not None,
          "train prints the token accuracy: " + p.stdout)
    check(re.search(r"^sequence accuracy: [01]\.\d{4}$", p.stdout, re.M) is not None,
          "train prints the sequence accuracy")
    # not a terminal: plain progress lines with every field
    check(re.search(r"^step 40/40 loss \d+\.\d+ acc [01]\.\d+ seq [01]\.\d+ lr "
                    r"\S+ \d+ tok/s elapsed \S+ ETA \S+$", p.stderr, re.M)
          is not None, "plain progress lines: " + p.stderr[-300:])
    check("\r" not in p.stderr, "no bar when stderr is not a terminal")

    # interrupted at 17 (a periodic checkpoint at 15 was written too), resumed
    p = run("train", *TINY, "--until", "17", "--save", b)
    check(p.returncode == 0, "train --until: " + p.stderr)
    check("trained 17 steps" in p.stdout, "--until stops at 17: " + p.stdout)
    p = run("train", "--resume", b, "--save", b, "--eval", "0")
    check(p.returncode == 0, "train --resume: " + p.stderr)
    check("resumed at step 17" in p.stderr and "trained 23 steps" in p.stdout,
          "resume continues at 17: " + p.stdout)
    check(same(a, b), "resumed checkpoint equals the uninterrupted one")
    p = run("train", *TINY, "--threads", "2", "--save", c)
    check(p.returncode == 0 and same(a, c), "2 threads give the same bytes")

    # mixed precision: bf16 products on 1 and 2 threads, the same bytes; a
    # resumed bf16 run sets --dtype again and equals the uninterrupted one
    bf = os.path.join(d, "bf.bin")
    p = run("train", *TINY, "--dtype", "bf16", "--save", bf)
    check(p.returncode == 0, "train --dtype bf16: " + p.stderr)
    ran = "mixed precision: bf16 products" in p.stderr
    check(ran or "has no AVX512_BF16" in p.stderr,
          "train --dtype bf16 says which path ran: " + p.stderr[:400])
    if not ran:
        sys.stderr.write("NOTE: no AVX512_BF16 here: --dtype bf16 ran f32\n")
    check(os.path.getsize(bf) == os.path.getsize(a), "a bf16 checkpoint is f32's size")
    check(same(bf, a) != ran, "bf16 products give another model (where they run)")
    p = run("train", *TINY, "--dtype", "bf16", "--threads", "2", "--save", c)
    check(p.returncode == 0 and same(bf, c), "bf16: 2 threads give the same bytes")
    p = run("train", *TINY, "--dtype", "bf16", "--until", "17", "--save", c)
    p = run("train", "--resume", c, "--dtype", "bf16", "--save", c, "--eval", "0")
    check(p.returncode == 0 and same(bf, c), "bf16: a resumed run equals the "
          "uninterrupted one")
    p = run("train", *TINY, "--dtype", "f16", "--save", c)
    check(p.returncode == 2 and "--dtype" in p.stderr, "--dtype f16 is refused: "
          + p.stderr)
    check("--dtype f32|bf16" in run("train", "--help").stdout, "help names --dtype")

    p = run("eval", a, "reverse", "--count", "300")
    check(p.returncode == 0, "eval: " + p.stderr)
    check(re.search(r"^token accuracy: [01]\.\d{4}$", p.stdout, re.M) is not None
          and re.search(r"^sequence accuracy: [01]\.\d{4}$", p.stdout, re.M)
          is not None, "eval lines: " + p.stdout)
    heads = re.findall(r"^mirror attention, layer \d head \d: ([01]\.\d{4})$",
                       p.stdout, re.M)
    check(len(heads) == 4, "a mirror figure per layer and head: " + p.stdout)
    p2 = run("eval", a, "reverse", "--count", "300")
    check(p2.stdout == p.stdout, "eval is deterministic")
    p = run("eval", a, "copy", "--count", "100")
    check(p.returncode == 0 and "trained on reverse" in p.stderr,
          "eval on another task notes the trained one")

    out = os.path.join(d, "maps")
    p = run("attend", a, "--input", "3 1 4 1 5", "--out", out)
    check(p.returncode == 0, "attend: " + p.stderr)
    check(re.search(r"^input:\s+3 1 4 1 5$", p.stdout, re.M) is not None and
          re.search(r"^expected:\s+5 1 4 1 3$", p.stdout, re.M) is not None and
          re.search(r"^prediction:(\s+\d){5}$", p.stdout, re.M) is not None,
          "attend prints input, prediction and answer: " + p.stdout)
    w = np.load(os.path.join(out, "weights.npy"))
    check(w.shape == (2, 1, 2, 5, 5) and w.dtype == np.float32, "weights shape %s" % (w.shape,))
    check(np.allclose(w.sum(-1), 1, atol=1e-5), "attention rows sum to 1")
    w01 = np.load(os.path.join(out, "layer0_head1.npy"))
    check(np.array_equal(w01, w[0, 0, 1]), "per-map file equals weights.npy")
    for name in ("attention.png", "layer1_head0.png"):
        f = os.path.join(out, name)
        check(os.path.isfile(f) and open(f, "rb").read(4) == b"\x89PNG", name)
    p = run("attend", a, "--input", "3 1 4", "--print")
    check(p.returncode == 0 and "layer 1 head 1" in p.stdout, "attend --print")

    # add: the layout with '+'
    add = os.path.join(d, "add.bin")
    p = run("train", "add", "--layers", "1", "--d-model", "16", "--heads", "2",
            "--ff", "16", "--steps", "5", "--eval", "50", "--save", add)
    check(p.returncode == 0, "train add: " + p.stderr)
    p = run("attend", add, "--input", "7 8 9 + 5 4 0")
    check(p.returncode == 0 and re.search(r"^expected:\s+2 3 0 1 \. \. \.$",
                                          p.stdout, re.M) is not None,
          "add expects 987 + 45 = 1032 least significant first: " + p.stdout)

    def fails(label, code, needle, *args):
        p = run(*args)
        check(p.returncode == code and needle in p.stderr,
              "%s: exit %d, stderr %r" % (label, p.returncode, p.stderr[:300]))

    fails("no --save", 2, "--save", "train", "reverse")
    fails("unknown task", 2, "unknown task", "train", "rev", "--save", c)
    fails("bad lr", 2, "--lr", "train", "reverse", "--lr", "-1", "--save", c)
    fails("heads not dividing", 1, "configuration", "train", "reverse",
          "--heads", "5", "--save", c)
    fails("resume with a model option", 2, "--layers", "train", "--resume", a,
          "--layers", "3", "--save", c)
    data = open(a, "rb").read()
    trunc = os.path.join(d, "trunc.bin")
    open(trunc, "wb").write(data[: len(data) // 2])
    fails("truncated eval", 1, "malformed", "eval", trunc, "reverse")
    fails("truncated resume", 1, "malformed", "train", "--resume", trunc,
          "--save", c)
    fails("missing file", 1, "cannot open", "eval", os.path.join(d, "no.bin"),
          "reverse")
    fails("token out of range", 2, "not a symbol", "attend", a, "--input", "1 12")
    fails("input too long", 2, "more than 6", "attend", a, "--input",
          "1 2 3 4 5 6 7")
    fails("add without +", 1, "'+'", "attend", add, "--input", "1 2 3 4 5")
    for sub in ("train", "eval", "attend"):
        p = run(sub, "--help")
        check(p.returncode == 0 and p.stdout.startswith("usage: attn " + sub),
              sub + " --help")

sys.exit(summary("cli_train"))

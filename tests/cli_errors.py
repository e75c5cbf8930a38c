"""Bad input through the command line: every failure class the CLI can meet
(wrong shapes, Dk mismatch, H % Hkv != 0, NaN input, bad option values,
missing and malformed files), each exiting with a positive status (never
killed by a signal) and the library's message on stderr; and --help on
every subcommand exiting 0.

usage: cli_errors.py PATH/TO/attn SOURCE_DIR
"""
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np

results = []


def run(attn, args):
    return subprocess.run([attn] + args, capture_output=True, text=True,
                          timeout=120)


def expect_fail(attn, label, args, *needles, code=None):
    p = run(attn, args)
    ok = p.returncode > 0 and (code is None or p.returncode == code)
    missing = [n for n in needles if n not in p.stderr]
    why = []
    if p.returncode < 0:
        why.append("killed by signal %d" % -p.returncode)
    elif p.returncode == 0:
        why.append("exit 0")
    elif code is not None and p.returncode != code:
        why.append("exit %d, wanted %d" % (p.returncode, code))
    if missing:
        why.append("stderr lacks %r" % missing)
    if "runtime error" in p.stderr or "Sanitizer" in p.stderr:
        why.append("sanitizer report")
    results.append((ok and not missing and not why, label,
                    "; ".join(why) + " | stderr: " + p.stderr.strip()[:300]))


def npy_bytes(header, data, major=1):
    pre = 10 if major == 1 else 12
    total = (pre + len(header) + 1 + 63) // 64 * 64
    hlen = total - pre
    h = header + " " * (hlen - len(header) - 1) + "\n"
    size = struct.pack("<H" if major == 1 else "<I", hlen)
    return b"\x93NUMPY" + bytes([major, 0]) + size + h.encode() + data


def main():
    attn = sys.argv[1]
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as d:
        def f(name, arr):
            path = os.path.join(d, name)
            np.save(path, arr)
            return path

        def raw(name, data):
            path = os.path.join(d, name)
            with open(path, "wb") as fh:
                fh.write(data)
            return path

        q = f("q.npy", rng.normal(size=(2, 5, 4)).astype(np.float32))
        k = f("k.npy", rng.normal(size=(2, 7, 4)).astype(np.float32))
        v = f("v.npy", rng.normal(size=(2, 7, 3)).astype(np.float32))
        out = os.path.join(d, "o.npy")
        base = ["sdpa", "--q", q, "--k", k, "--v", v, "--out", out]

        # the baseline works, so each failure below is the one thing changed
        p = run(attn, base)
        results.append((p.returncode == 0, "baseline sdpa", p.stderr))

        # shapes (ATTN_E_SHAPE from the library, usage errors from the CLI)
        k5 = f("k5.npy", rng.normal(size=(2, 7, 5)).astype(np.float32))
        expect_fail(attn, "Dk mismatch", ["sdpa", "--q", q, "--k", k5, "--v", v,
                                          "--out", out],
                    "shape mismatch", "k has 5 features but q has 4", code=1)
        q3h = f("q3h.npy", rng.normal(size=(1, 3, 5, 4)).astype(np.float32))
        k2h = f("k2h.npy", rng.normal(size=(1, 2, 7, 4)).astype(np.float32))
        v2h = f("v2h.npy", rng.normal(size=(1, 2, 7, 3)).astype(np.float32))
        expect_fail(attn, "H % Hkv != 0", ["sdpa", "--q", q3h, "--k", k2h, "--v",
                                           v2h, "--out", out],
                    "q has 3 heads, not a multiple of the 2 heads", code=1)
        kb = f("kb.npy", rng.normal(size=(3, 7, 4)).astype(np.float32))
        expect_fail(attn, "batch mismatch", ["sdpa", "--q", q, "--k", kb, "--v", v,
                                             "--out", out],
                    "batch sizes differ", code=1)
        v6 = f("v6.npy", rng.normal(size=(2, 6, 3)).astype(np.float32))
        expect_fail(attn, "v length mismatch", ["sdpa", "--q", q, "--k", k, "--v",
                                                v6, "--out", out],
                    "v has 6 positions but k has 7", code=1)
        q1 = f("q1.npy", rng.normal(size=(4,)).astype(np.float32))
        expect_fail(attn, "rank 1 q", ["sdpa", "--q", q1, "--k", k, "--v", v,
                                       "--out", out], "rank 2 (L, D)", code=2)
        q5 = f("q5.npy", np.zeros((1, 1, 1, 2, 4), np.float32))
        expect_fail(attn, "rank 5 q", ["sdpa", "--q", q5, "--k", k, "--v", v,
                                       "--out", out], "rank 2 (L, D)", code=2)
        q0 = f("q0.npy", np.zeros((0, 4), np.float32))
        expect_fail(attn, "zero-size q", ["sdpa", "--q", q0, "--k", k, "--v", v,
                                          "--out", out], "every extent >= 1",
                    code=2)

        # dtypes (ATTN_E_DTYPE) and non-finite input (ATTN_E_NONFINITE)
        qi = f("qi.npy", np.ones((2, 5, 4), np.int32))
        expect_fail(attn, "integer q", ["sdpa", "--q", qi, "--k", k, "--v", v,
                                        "--out", out], "float array", code=1)
        qh = f("qh.npy", np.ones((2, 5, 4), np.float16))
        expect_fail(attn, "f16 q with f32 k", ["sdpa", "--q", qh, "--k", k, "--v",
                                               v, "--out", out],
                    "q is f16, k is f32, v is f32: the inputs must share one "
                    "dtype, as in PyTorch", code=2)
        expect_fail(attn, "f64 compute without ref",
                    base + ["--compute-dtype", "f64"],
                    "--compute-dtype f64 runs on the reference kernel only: "
                    "add --impl ref", code=2)
        qn = rng.normal(size=(2, 5, 4)).astype(np.float32)
        qn[1, 2, 3] = np.nan
        expect_fail(attn, "NaN in q", ["sdpa", "--q", f("qn.npy", qn), "--k", k,
                                       "--v", v, "--out", out],
                    "non-finite input", "q[1, 0, 2, 3] is NaN", code=1)
        kn = rng.normal(size=(2, 7, 4)).astype(np.float32)
        kn[0, 6, 0] = np.inf
        expect_fail(attn, "Inf in k", ["sdpa", "--q", q, "--k", f("kn.npy", kn),
                                       "--v", v, "--out", out],
                    "non-finite input", "is Inf", code=1)
        bias = np.zeros((5, 7), np.float32)
        bias[1, 1] = np.nan
        expect_fail(attn, "NaN in bias", base + ["--bias", f("bn.npy", bias)],
                    "non-finite input", "mask.bias[0, 0, 1, 1] is NaN", code=1)
        bias[1, 1] = np.inf
        expect_fail(attn, "+inf in bias", base + ["--bias", f("bi.npy", bias)],
                    "+inf", code=1)

        # mask-shaped inputs of the wrong size, lengths, layouts
        expect_fail(attn, "mask of wrong shape",
                    base + ["--mask", f("m.npy", np.ones((6, 7), np.bool_))],
                    "mask.keep has 6 entries on the query axis", code=1)
        expect_fail(attn, "bias of wrong shape",
                    base + ["--bias", f("b.npy", np.ones((3, 5, 7), np.float32))],
                    "mask.bias has 3 entries on the batch axis", code=1)
        expect_fail(attn, "key lengths count",
                    base + ["--key-lengths", f("kl3.npy", np.array([1, 2, 3]))],
                    "--key-lengths has 3 entries but the batch has 2", code=1)
        expect_fail(attn, "key length > Lk",
                    base + ["--key-lengths", f("kl8.npy", np.array([1, 8]))],
                    "key_lengths[1] = 8 is outside [0, 7]", code=1)
        expect_fail(attn, "query length < 0",
                    base + ["--query-lengths", f("ql.npy", np.array([-1, 2]))],
                    "query_lengths[0] = -1", code=1)
        expect_fail(attn, "fractional lengths (ATTN_E_INVALID)",
                    base + ["--key-lengths", f("klf.npy", np.array([2.5, 3.0]))],
                    "invalid argument", "2.5, not an integer", code=1)
        expect_fail(attn, "lengths of rank 2",
                    base + ["--key-lengths", f("kl2.npy", np.ones((2, 1), np.int64))],
                    "must have rank 1", code=1)
        expect_fail(attn, "layout of wrong shape",
                    base + ["--block-sparse", "2," + f("lay.npy", np.ones((3, 3), np.uint8))],
                    "layout has shape (3, 3)", "(3, 4)", code=1)
        expect_fail(attn, "layout with wrong head count",
                    base + ["--block-sparse", "2," + f("lay3.npy", np.ones((2, 3, 4), np.uint8))],
                    "layout has shape (2, 3, 4)", code=1)

        # bad option values: usage errors (exit 2) naming the option
        bad_opts = [
            (["--scale", "-1"], "--scale must be a positive number"),
            (["--scale", "0"], "--scale must be a positive number"),
            (["--scale", "abc"], "--scale must be a positive number"),
            (["--scale", "nan"], "--scale must be a positive number"),
            (["--causal", "sideways"], "--causal takes top-left or bottom-right"),
            (["--causal", "top-left", "--align", "bottom-right"], "contradicts"),
            (["--window", "1"], "--window takes LEFT,RIGHT"),
            (["--window", "a,b"], "--window takes LEFT,RIGHT"),
            (["--window", "-2,0"], "--window takes LEFT,RIGHT"),
            (["--window", "1,2,3"], "--window takes LEFT,RIGHT"),
            (["--impl", "fast"], "--impl takes auto, ref, flash or flash_bf16"),
            (["--threads", "-1"], "--threads must be an integer"),
            (["--threads", "2x"], "--threads must be an integer"),
            (["--dropout", "1"], "--dropout must be in [0, 1)"),
            (["--dropout", "-0.1"], "--dropout must be in [0, 1)"),
            (["--seed", "-5"], "--seed must be an integer >= 0"),
            (["--seed", "99999999999999999999999"], "--seed must be an integer >= 0"),
            (["--random-blocks", "0,0.5,1"], "--random-blocks takes BLOCK,KEEP_P,SEED"),
            (["--random-blocks", "4,1.5,1"], "--random-blocks takes BLOCK,KEEP_P,SEED"),
            (["--random-blocks", "4,0.5"], "--random-blocks takes BLOCK,KEEP_P,SEED"),
            (["--block-sparse", "0,x.npy"], "BLOCK must be a positive integer"),
            (["--block-sparse", "x.npy"], "--block-sparse takes BLOCK,LAYOUT.npy"),
            (["--mask-convention", "inverted"], "--mask-convention takes keep, masked"),
            (["--mask-convention", "keep"], "--mask-convention needs --mask"),
            (["--compute-dtype", "f8"], "--compute-dtype takes f32, f16, bf16"),
            (["--frobnicate", "1"], "unknown argument '--frobnicate'"),
            (["--scale"], "--scale needs a value"),
            (["--lse"], "--lse needs a value"),
        ]
        for extra, needle in bad_opts:
            expect_fail(attn, "option " + " ".join(extra), base + extra, needle,
                        code=2)
        expect_fail(attn, "missing --v", ["sdpa", "--q", q, "--k", k, "--out", out],
                    "missing --v (it is required)", code=2)

        # files (ATTN_E_IO and ATTN_E_FORMAT)
        expect_fail(attn, "missing file", ["sdpa", "--q", os.path.join(d, "nope.npy"),
                                           "--k", k, "--v", v, "--out", out],
                    "I/O error", "nope.npy: cannot open", code=1)
        expect_fail(attn, "directory as input", ["sdpa", "--q", d, "--k", k, "--v", v,
                                                 "--out", out],
                    "I/O error", "not a regular file", code=1)
        expect_fail(attn, "unwritable output",
                    base[:-1] + [os.path.join(d, "no", "such", "dir.npy")],
                    "I/O error", "no/such does not exist", code=1)
        expect_fail(attn, "missing mask file",
                    base + ["--mask", os.path.join(d, "nomask.npy")],
                    "reading --mask", "I/O error", code=1)
        good = open(q, "rb").read()
        malformed = [
            ("truncated", good[:-3], "truncated"),
            ("header only", good[:128], "truncated"),
            ("bad magic", b"\x93NUMPX" + good[6:], "magic string"),
            ("bad version", good[:6] + b"\x07\x00" + good[8:], "version 7.0"),
            ("lying header", npy_bytes(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 6, 4), }",
                good[128:]), "48 elements"),
            ("trailing bytes", good + b"\0\0\0\0", "trailing bytes"),
            ("fortran order", npy_bytes(
                "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 5, 4), }",
                good[128:]), "Fortran order"),
            ("big-endian", npy_bytes(
                "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 5, 4), }",
                good[128:]), "big-endian"),
            ("complex dtype", npy_bytes(
                "{'descr': '<c8', 'fortran_order': False, 'shape': (2, 5, 2), }",
                good[128:]), "'<c8' is not supported"),
            ("absurd shape", npy_bytes(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4), }",
                good[128:]), "64 bits"),
            ("negative shape", npy_bytes(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -5, 4), }",
                good[128:]), "negative dimension"),
            ("broken dict", npy_bytes(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 5, 4)",
                good[128:]), "malformed .npy header"),
            ("empty file", b"", "truncated"),
        ]
        for label, data, needle in malformed:
            path = raw("bad.npy", data)
            expect_fail(attn, "malformed q: " + label,
                        ["sdpa", "--q", path, "--k", k, "--v", v, "--out", out],
                        "reading q", "malformed file", needle, code=1)
        path = raw("badmask.npy", good[:-1])
        expect_fail(attn, "malformed mask", base + ["--mask", path],
                    "reading --mask", "malformed file", code=1)
        expect_fail(attn, "malformed lengths", base + ["--key-lengths", path],
                    "reading --key-lengths", "malformed file", code=1)
        expect_fail(attn, "malformed layout", base + ["--block-sparse", "2," + path],
                    "layout", "malformed file", code=1)

        # the front door
        expect_fail(attn, "no command", [], "usage", code=2)
        expect_fail(attn, "unknown command", ["frobnicate"], "unknown command", code=2)
        expect_fail(attn, "demo: bad argument", ["demo", "--bogus"],
                    "unexpected argument", code=2)

    # --help on every subcommand listed by `attn --help`
    p = run(attn, ["--help"])
    results.append((p.returncode == 0, "attn --help", p.stderr))
    cmds = re.findall(r"^  (\S+)\s", p.stdout, re.M)
    results.append((len(cmds) >= 3 and "sdpa" in cmds and "demo" in cmds,
                    "attn --help lists the commands", repr(cmds)))
    for c in cmds:
        for flag in ("--help", "-h"):
            h = run(attn, [c, flag])
            results.append((h.returncode == 0 and "usage: attn " + c in h.stdout,
                            "attn %s %s" % (c, flag),
                            "exit %d: %s" % (h.returncode, h.stderr[:200])))

    failed = [r for r in results if not r[0]]
    for r in failed:
        print("FAIL", r[1] + ":", r[2])
    print("%d passed, %d failed" % (len(results) - len(failed), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

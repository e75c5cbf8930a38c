"""CLI argument fuzzer: random and extreme values for every option of every
subcommand, run against the sanitizer build (registered as a CTest test
there only).

    python3 tests/fuzz/cli_args.py PATH/TO/attn [SOURCE_DIR]

The options come from each subcommand's --help (every --name there), the
values from the option's metavariable (FILE.npy, N, A,B, auto|ref|flash)
or, a third of the time, from a pool of hostile values (huge, negative,
non-numeric, NaN, empty, paths that are folders, missing, malformed .npy
files, device-node copies when root). Outputs go to a scratch folder only.

Fails on: a sanitizer report, a signal (crash, abort), or an exit status
other than 0 (success), 1 (failure) or 2 (usage error), the statuses
README documents (and 3 from `attn stats --strict`, as its --help says). A run past its time limit is reported, not failed (a
valid --steps 2^62 takes that long).

Bounded: ATTN_CLI_FUZZ_RUNS runs (default 400) or ATTN_CLI_FUZZ_SECONDS
seconds (default 75), whichever comes first. Reproducible:
ATTN_CLI_FUZZ_SEED (default 12; the seed is printed), and every failing
command line is printed with the scratch folder it ran in.
"""
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

import numpy as np

ATTN = os.path.abspath(sys.argv[1])
SEED = int(os.environ.get("ATTN_CLI_FUZZ_SEED", "12"))
RUNS = int(os.environ.get("ATTN_CLI_FUZZ_RUNS", "400"))
SECONDS = float(os.environ.get("ATTN_CLI_FUZZ_SECONDS", "75"))
PER_RUN = 15  # seconds
# long by design (minutes of benchmarks, a whole gallery); their options
# are shared with the subcommands fuzzed here
SKIP = {"demo", "bench", "bench-layers", "version"}
SAN = ("runtime error:", "AddressSanitizer", "LeakSanitizer",
       "UndefinedBehaviorSanitizer")

EXTREME_NUMBERS = [
    "0", "1", "-1", "2", "3", "17", "-2", "2147483647", "2147483648",
    "-2147483649", "4294967296", "9223372036854775807", "9223372036854775808",
    "-9223372036854775808", "-9223372036854775809", "18446744073709551615",
    "18446744073709551616", "99999999999999999999999", "1e308", "1e309",
    "-1e308", "3.4e38", "1e-320", "0.5", "-0.5", "0.999999", "1.0000001",
    "nan", "inf", "-inf", "0x10", "1e3", " 1", "1 ", "+1", "", "abc", "1,2",
    ",", "1,", ",1", "1,2,3,4,5", "--", "-", "%s%n", "\x01\x7f",
    "\u00e9", "a" * 5000,
]


def make_inputs(d, rng):
    """The valid and hostile files the values point at."""
    f = {}

    def save(name, a):
        p = os.path.join(d, name)
        np.save(p, a)
        f.setdefault("npy", []).append(p)
        return p

    r = np.random.default_rng(0)
    for name, shape in (("q2", (5, 4)), ("q3", (2, 5, 4)), ("q4", (1, 2, 5, 4)),
                        ("x8", (2, 3, 8)), ("x1", (1, 1))):
        save(name + ".npy", r.standard_normal(shape).astype(np.float32))
    save("w3.npy", np.full((2, 3, 3), 1 / 3, np.float32))
    save("w2.npy", np.full((5, 5), 0.2, np.float32))
    save("f16.npy", r.standard_normal((5, 4)).astype(np.float16))
    save("f64.npy", r.standard_normal((5, 4)))
    save("lens.npy", np.array([3, 5], np.int64))
    save("lens_bad.npy", np.array([-1, 2**40], np.int64))
    save("mask.npy", r.random((5, 5)) > 0.3)
    save("bias.npy", np.where(r.random((5, 5)) > 0.8, -np.inf, 0.5).astype(np.float32))
    save("layout.npy", np.ones((1, 1), np.uint8))
    save("nan.npy", np.full((5, 4), np.nan, np.float32))
    save("empty.npy", np.zeros((0, 4), np.float32))
    save("ints.npy", np.arange(20, dtype=np.int32).reshape(5, 4))
    save("rank5.npy", np.zeros((1, 1, 1, 2, 2), np.float32))
    bad = []
    for name, data in (("trunc.npy", open(f["npy"][0], "rb").read()[:-3]),
                       ("garbage.npy", bytes(rng.randrange(256) for _ in range(200))),
                       ("zero.npy", b""),
                       ("hdr.npy", b"\x93NUMPY\x01\x00\xff\xff{'descr'")):
        p = os.path.join(d, name)
        open(p, "wb").write(data)
        bad.append(p)
    f["bad"] = bad
    sub = os.path.join(d, "folder")
    os.mkdir(sub)
    f["folder"] = sub
    # a parameter file and a checkpoint, made by the CLI itself
    f["bin"] = []
    for args, name in ((["mha", "--query", f["npy"][3], "--out",
                         os.path.join(d, "o.npy"), "--init-seed", "1",
                         "--heads", "2"], "mha.bin"),
                       (["train", "reverse", "--steps", "1", "--d-model", "8",
                         "--ff", "8", "--heads", "2", "--layers", "1",
                         "--length", "4"], "ckpt.bin")):
        p = os.path.join(d, name)
        flag = "--save-params" if args[0] == "mha" else "--save"
        subprocess.run([ATTN] + args + [flag, p], capture_output=True,
                       env=env(), timeout=120)
        if os.path.exists(p):
            f["bin"].append(p)
    f["dev"] = []
    if os.geteuid() == 0:
        for name, minor in (("dev_full", 7), ("dev_null", 3)):
            p = os.path.join(d, name)
            os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
            f["dev"].append(p)
    return f


def env(args=()):
    e = dict(os.environ)
    # as in release: a huge allocation fails (ATTN_E_NOMEM), not ASan
    e["ASAN_OPTIONS"] = ("detect_leaks=1:halt_on_error=1:abort_on_error=0:"
                         "allocator_may_return_null=1")
    e["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    e["OMP_NUM_THREADS"] = "2"
    if "SOURCE" in globals() and SOURCE:
        supp = os.path.join(SOURCE, "tests", "lsan.supp")
        if "--ring" in args:
            # a ring of one starts MPI: Open MPI keeps allocations until
            # exit, matched by library on full stacks (the ring tests' file)
            supp = os.path.join(SOURCE, "tests", "dist", "lsan_mpi.supp")
            e["ASAN_OPTIONS"] += ":fast_unwind_on_malloc=0"
        e["LSAN_OPTIONS"] = "suppressions=" + supp
    return e


SOURCE = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else None


def subcommands():
    out = subprocess.run([ATTN, "--help"], capture_output=True, text=True).stdout
    return [m.group(1) for m in re.finditer(r"^  ([a-z][a-z-]+)\s", out, re.M)
            if m.group(1) not in SKIP]


def options(cmd):
    """{option: metavariable or None} from attn CMD --help."""
    r = subprocess.run([ATTN, cmd, "--help"], capture_output=True, text=True,
                       env=env())
    text = r.stdout + r.stderr
    opts = {}
    for m in re.finditer(r"(?<![\w-])(--[a-z][a-z0-9-]*|-o)(?:[ =]([^\s\]\[]+))?",
                         text):
        name, meta = m.group(1), m.group(2)
        if meta and (meta.startswith("-") or meta in ("or", "and", "(", "|")):
            meta = None
        if name == "--help":
            continue
        if name not in opts or (meta and not opts[name]):
            opts[name] = meta
    return opts


def value(rng, meta, files, scratch):
    """A value for an option whose help shows metavariable meta."""
    if rng.random() < 0.3 or not meta:
        pool = rng.choice(["num", "num", "path", "out"])
    elif re.search(r"\.npy|^[QKVWXM]|DOUT|LENS|BIAS|MASK", meta):
        pool = "npy" if "," not in meta else "comma"
    elif re.search(r"\.(png|svg|pdf|html)|DIR|OUT", meta):
        pool = "out"
    elif re.search(r"\.bin|FILE|MODEL|CKPT|PARAMS", meta):
        pool = "bin"
    elif "|" in meta:
        return rng.choice(meta.split("|") + ["", "bogus"])
    elif "," in meta:
        pool = "comma"
    else:
        pool = "num"
    if pool == "num":
        return rng.choice(EXTREME_NUMBERS)
    if pool == "comma":
        n = meta.count(",") + 1 if meta else rng.randrange(1, 4)
        parts = [rng.choice(EXTREME_NUMBERS[:30]) for _ in range(n)]
        if meta and ".npy" in meta:
            parts[-1] = rng.choice(files["npy"] + files["bad"])
        return ",".join(parts)
    if pool == "npy":
        return rng.choice(files["npy"] * 3 + files["bad"] + [files["folder"],
                          os.path.join(scratch, "missing.npy")] + files["dev"])
    if pool == "bin":
        return rng.choice(files["bin"] * 3 + files["bad"] + files["npy"][:1] +
                          [os.path.join(scratch, "missing.bin"), files["folder"]])
    if pool == "out":
        ext = rng.choice([".npy", ".png", ".svg", ".pdf", ".html", ".bin", ""])
        return rng.choice([os.path.join(scratch, "out%d%s" % (rng.randrange(3), ext))] * 4
                          + [files["folder"], os.path.join(scratch, "no", "x.npy")]
                          + files["dev"])
    return rng.choice(files["npy"])


def templates(f, scratch):
    """A valid command line per subcommand: two runs in three start from
    one and change or add a few options, so that the fuzzing reaches past
    the usage checks."""
    n = {os.path.basename(p): p for p in f["npy"]}
    o = lambda ext: os.path.join(scratch, "t" + ext)  # noqa: E731
    q4, x8, w3 = n["q4.npy"], n["x8.npy"], n["w3.npy"]
    ck = [p for p in f["bin"] if p.endswith("ckpt.bin")] or [""]
    return {
        "sdpa": ["--q", q4, "--k", q4, "--v", q4, "--out", o(".npy")],
        "sdpa-backward": ["--q", q4, "--k", q4, "--v", q4, "--dout", q4,
                          "--dq", o("1.npy"), "--dk", o("2.npy"), "--dv",
                          o("3.npy")],
        "mha": ["--query", x8, "--out", o(".npy"), "--init-seed", "1",
                "--heads", "2"],
        "additive": ["--query", x8, "--out", o(".npy"), "--init-seed", "1",
                     "--attn-dim", "4"],
        "encoder": ["--x", x8, "--out", o(".npy"), "--init-seed", "1",
                    "--heads", "2"],
        "train": ["reverse", "--steps", "2", "--d-model", "8", "--ff", "8",
                  "--heads", "2", "--layers", "1", "--length", "4", "--save",
                  o(".bin")],
        "eval": [ck[0], "reverse", "--count", "8"],
        "attend": [ck[0], "--input", "1 2 3 0"],
        "heatmap": [w3, "-o", o(".png")],
        "show": [w3],
        "html": [w3, "-o", o(".html")],
        "stats": [w3],
        "compare": [w3, w3],
    }


def main():
    rng = random.Random(SEED)
    top = tempfile.mkdtemp(prefix="attn_cli_fuzz_")
    pristine = os.path.join(top, "in")
    os.mkdir(pristine)
    files = make_inputs(pristine, rng)
    cmds = subcommands()
    table = {c: options(c) for c in cmds}
    print("cli_args: seed %d, up to %d runs or %.0f s, %d subcommands, %d "
          "options in all" % (SEED, RUNS, SECONDS, len(cmds),
                              sum(len(o) for o in table.values())))
    failures, slow, codes = [], [], {}
    t0 = time.time()
    runs = 0
    scratch = os.path.join(top, "work")
    while runs < RUNS and time.time() - t0 < SECONDS:
        if runs % 25 == 0:  # outputs may have hit the inputs: start afresh
            shutil.rmtree(scratch, ignore_errors=True)
            os.mkdir(scratch)
            for k in ("npy", "bad", "bin"):
                for p in files[k]:
                    shutil.copy(p, scratch)
            for p in files["dev"]:
                if not stat.S_ISCHR(os.lstat(p).st_mode):
                    failures.append("device node %s was replaced" % p)
        cmd = rng.choice(cmds)
        opts = table[cmd]
        args = [cmd]
        base = templates(files, scratch).get(cmd)
        if base and rng.random() < 0.67:
            args += base
            names = list(opts)
            for _ in range(rng.randrange(0, 3)):
                name = rng.choice(names)
                args.append(name)
                if opts.get(name) or rng.random() < 0.1:
                    args.append(value(rng, opts.get(name), files, scratch))
        else:  # from nothing
            if cmd == "train":
                args.append(rng.choice(["reverse", "copy", "sort", "add",
                                        "bogus", ""]))
            if cmd in ("eval", "attend"):
                args.append(rng.choice(files["bin"] + files["bad"]))
            if cmd == "eval":
                args.append(rng.choice(["reverse", "add", "x"]))
            if cmd in ("heatmap", "show", "html", "stats") and rng.random() < 0.6:
                args.append(rng.choice(files["npy"] + files["bad"]))
            if cmd == "compare":
                args += [rng.choice(files["npy"]), rng.choice(files["npy"])]
            names = list(opts)
            for _ in range(rng.randrange(0, 9)):
                name = rng.choice(names) if names else "--bogus"
                args.append(name)
                if opts.get(name) or rng.random() < 0.2:
                    args.append(value(rng, opts.get(name), files, scratch))
        if rng.random() < 0.05:
            args.append(rng.choice(["--bogus", "-x", "", "--q"]))
        runs += 1
        try:
            r = subprocess.run([ATTN] + args, capture_output=True, env=env(args),
                               timeout=PER_RUN, cwd=scratch)
        except subprocess.TimeoutExpired:
            slow.append(args)
            continue
        err = r.stderr.decode("utf-8", "replace")
        codes[r.returncode] = codes.get(r.returncode, 0) + 1
        bad = None
        if any(s in err for s in SAN):
            bad = "sanitizer report"
        elif r.returncode < 0:
            bad = "killed by signal %d" % -r.returncode
        elif r.returncode not in (0, 1, 2) and not (
                r.returncode == 3 and cmd == "stats" and "--strict" in args):
            # 3: `attn stats --strict` found something (its --help says so)
            bad = "exit status %d" % r.returncode
        if bad:
            failures.append("%s: attn %s (in %s)\n%s" % (
                bad, " ".join(repr(a) for a in args), scratch, err[-3000:]))
            print("FAIL", failures[-1])
    print("cli_args: %d runs in %.0f s; exit statuses %s; %d past %d s%s" % (
        runs, time.time() - t0, dict(sorted(codes.items())), len(slow), PER_RUN,
        "".join("\n  slow: attn " + " ".join(repr(a) for a in s) for s in slow)))
    for p in files["dev"]:
        if not stat.S_ISCHR(os.lstat(p).st_mode):
            failures.append("device node %s was replaced" % p)
    if not failures:
        shutil.rmtree(top, ignore_errors=True)
    print("cli_args: %d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())

"""The CLI against hostile arguments and outputs (issue 12): a huge block
size, options given twice, outputs that are device nodes, a full disk.

Device nodes need root (mknod): CI runs as root, and there this test makes
its own copies of /dev/full, /dev/null and /dev/zero in a temporary folder
and fails if it cannot. Unprivileged it says so and checks the rest.
"""
import os
import resource
import signal
import stat
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import check, run, summary  # noqa: E402

SAN = ("runtime error", "AddressSanitizer", "LeakSanitizer")


def clean(r, what):
    """No sanitizer report in r's stderr."""
    return check(not any(s in r.stderr for s in SAN),
                 "%s: sanitizer report:\n%s" % (what, r.stderr[-2000:]))


def is_char(path):
    return stat.S_ISCHR(os.lstat(path).st_mode)


def main():
    d = tempfile.mkdtemp(prefix="attn_cli_hardening_")
    rng = np.random.default_rng(0)
    qp, kp, vp = (os.path.join(d, n + ".npy") for n in "qkv")
    for p in (qp, kp, vp):
        np.save(p, rng.standard_normal((6, 4)).astype(np.float32))
    lay = os.path.join(d, "layout.npy")
    np.save(lay, np.ones((1, 1), np.uint8))
    out = os.path.join(d, "o.npy")
    base = ["--q", qp, "--k", kp, "--v", vp, "--out", out]

    # 1. a block size near 2^63: no overflow in ceil(L / BLOCK); one layout
    # cell covers everything, so it is valid and equals no mask
    for cmd in (["sdpa"] + base, ["sdpa-backward", "--q", qp, "--k", kp,
                                  "--v", vp, "--dout", qp]
                + sum((["--d" + x, os.path.join(d, "d%s.npy" % x)]
                       for x in "qkv"), []),
                ["heatmap", "--q", qp, "--k", kp, "--out",
                 os.path.join(d, "h.png")]):
        r = run(cmd + ["--block-sparse", "9223372036854775807," + lay])
        clean(r, " ".join(cmd[:1]) + " --block-sparse 2^63-1")
        check(r.returncode == 0, "%s --block-sparse 2^63-1: rc %d\n%s" % (
            cmd[0], r.returncode, r.stderr))
    r = run(["sdpa"] + base + ["--block-sparse", "9223372036854775807," + lay])
    ref = run(["sdpa", "--q", qp, "--k", kp, "--v", vp, "--out",
               os.path.join(d, "o_ref.npy")])
    check(r.returncode == 0 and ref.returncode == 0 and np.array_equal(
        np.load(out), np.load(os.path.join(d, "o_ref.npy"))),
        "--block-sparse 2^63-1 with a 1x1 layout differs from no mask")
    r = run(["sdpa"] + base + ["--block-sparse", "9223372036854775808," + lay])
    check(r.returncode == 2 and "BLOCK" in r.stderr,
          "--block-sparse 2^63: rc %d %s" % (r.returncode, r.stderr))

    # 2. label options given twice: refused (one list would be dropped),
    # nothing leaks, nothing written
    w = os.path.join(d, "w.npy")
    np.save(w, np.full((2, 3), 1 / 3, np.float32))
    for cmd, opts in (("heatmap", ("--x-tokens", "--y-tokens", "--tokens")),
                      ("html", ("--q-tokens", "--k-tokens"))):
        for opt in opts:
            n = "a b c" if opt in ("--x-tokens", "--k-tokens") else "a b"
            if opt == "--tokens":
                np.save(w, np.full((3, 3), 1 / 3, np.float32))
                n = "a b c"
            dest = os.path.join(d, "t." + ("png" if cmd == "heatmap" else "html"))
            args = [cmd, w, "--out", dest]
            r = run(args + [opt, "x y z w", opt, n])
            clean(r, "%s %s twice" % (cmd, opt))
            check(r.returncode == 2 and "given twice" in r.stderr and
                  not os.path.exists(dest), "%s %s twice: rc %d\n%s" % (
                      cmd, opt, r.returncode, r.stderr))
            np.save(w, np.full((2, 3), 1 / 3, np.float32))

    # 3. device nodes as outputs (root): never removed or replaced
    if os.geteuid() == 0:
        nodes = {}
        for name, minor in (("full", 7), ("null", 3), ("zero", 5)):
            p = os.path.join(d, name)
            try:
                os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
            except OSError as e:
                check(False, "running as root, mknod %s failed: %s" % (p, e))
                return
            nodes[name] = p
        r = run(["sdpa", "--q", qp, "--k", kp, "--v", vp, "--out",
                 nodes["full"]])
        check(r.returncode == 1 and "No space" in r.stderr,
              "sdpa --out /dev/full copy: rc %d %s" % (r.returncode, r.stderr))
        check(is_char(nodes["full"]), "sdpa --out removed the /dev/full copy")
        r = run(["sdpa", "--q", qp, "--k", kp, "--v", vp, "--out",
                 nodes["null"], "--weights", nodes["zero"]])
        check(r.returncode == 0, "sdpa --out /dev/null copy: rc %d %s" % (
            r.returncode, r.stderr))
        r = run(["train", "reverse", "--steps", "1", "--d-model", "8",
                 "--ff", "8", "--heads", "2", "--layers", "1", "--save",
                 nodes["null"]])
        check(r.returncode == 0, "train --save /dev/null copy: rc %d %s" % (
            r.returncode, r.stderr))
        r = run(["mha", "--query", qp, "--out", out, "--init-seed", "1",
                 "--heads", "2", "--save-params", nodes["zero"]])
        check(r.returncode == 0, "mha --save-params /dev/zero copy: rc %d %s" % (
            r.returncode, r.stderr))
        for name, p in nodes.items():
            check(is_char(p), "the /dev/%s copy is no longer a device" % name)
    else:
        print("device nodes: not root, mknod unavailable; skipped that part")

    # 4. a full disk (RLIMIT_FSIZE): the existing output survives, no temp
    np.save(out, np.arange(3, dtype=np.float32))
    before = open(out, "rb").read()
    big = os.path.join(d, "big.npy")
    np.save(big, rng.standard_normal((512, 16)).astype(np.float32))

    def small_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    import subprocess
    from clitest import ATTN
    r = subprocess.run([ATTN, "sdpa", "--q", big, "--k", big, "--v", big,
                        "--out", out], capture_output=True, text=True,
                       preexec_fn=small_disk)
    check(r.returncode == 1, "sdpa --out on a full disk: rc %d %s" % (
        r.returncode, r.stderr))
    check(open(out, "rb").read() == before,
          "sdpa --out on a full disk changed or removed the existing file")
    left = [n for n in os.listdir(d) if ".tmp" in n]
    check(not left, "temporaries left: %s" % left)

    for n in os.listdir(d):
        os.unlink(os.path.join(d, n))
    os.rmdir(d)


main()
sys.exit(summary("cli_hardening"))

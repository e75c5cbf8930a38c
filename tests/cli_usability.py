"""What a new user trips over (issue 11), one check per defect: float masks
are additive as in PyTorch, encoder weights can be drawn and checked,
outputs never overwrite inputs, messages name what is missing, ...

usage: cli_usability.py PATH/TO/attn SOURCE_DIR
"""
import os
import shutil
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


def main():
    try:
        float_masks()
    finally:
        shutil.rmtree(D, ignore_errors=True)
    return summary("cli_usability")


if __name__ == "__main__":
    sys.exit(main())

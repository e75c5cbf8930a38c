"""`mpirun -np P attn sdpa --ring LAYOUT` and `attn sdpa-backward --ring`
write the files of the one-process command (same shapes, values within
f32 rounding, dropout included); rank 0 alone writes; --ring's own errors;
a sequence too short for P ranks is a clear error, not a hang; ranks
that read different inputs are refused; a rank that does not join (no
--ring, --help, not attn at all) ends the job within a bounded wait.
`attn bench --ring` runs and prints its summary lines.

usage: cli_ring.py PATH/TO/attn SOURCE_DIR MPIEXEC
(the mpirun of the build; each mpirun has a timeout)
"""
import os
import shlex
import subprocess
import sys
import tempfile

import numpy as np

from clitest import ATTN, check, run, summary

MPIEXEC = sys.argv[3]
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def mpirun(np_, args, timeout=120):
    cmd = [MPIEXEC, "-np", str(np_), "--oversubscribe", "--allow-run-as-root",
           "--bind-to", "none", ATTN] + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV,
                          timeout=timeout)


def per_rank(np_, args_of, timeout=120, other=None, env=None):
    """mpirun with a command per rank: args_of(rank) for attn, or the
    program `other` on the ranks above 0 when given."""
    lines = ["#!/bin/sh", 'case "$OMPI_COMM_WORLD_RANK" in']
    for rank in range(np_):
        if other and rank > 0:
            cmd = other
        else:
            cmd = " ".join(shlex.quote(a) for a in [ATTN] + list(args_of(rank)))
        lines.append("%d) exec %s ;;" % (rank, cmd))
    lines.append("esac")
    fd, script = tempfile.mkstemp(suffix=".sh")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(script, 0o700)
    e = dict(ENV)
    e.update(env or {})
    try:
        return subprocess.run([MPIEXEC, "-np", str(np_), "--oversubscribe",
                               "--allow-run-as-root", "--bind-to", "none", script],
                              capture_output=True, text=True, env=e, timeout=timeout)
    finally:
        os.remove(script)


def main():
    rng = np.random.default_rng(3)
    with tempfile.TemporaryDirectory() as d:
        p = lambda n: os.path.join(d, n)
        # rank-4 GQA, rank-3 and rank-2 inputs
        shapes = [((2, 4, 37, 8), (2, 2, 37, 8)), ((3, 29, 6), (3, 29, 6)),
                  ((41, 5), (41, 5))]
        # rotary positions: each rank rotates its rows at global positions
        opts = [["--causal", "top-left", "--key-lengths", p("kl.npy"),
                 "--rope", "neox", "--rope-theta", "500"],
                ["--causal", "bottom-right", "--dropout", "0.3", "--seed", "11"],
                ["--window", "4,2", "--rope", "interleaved", "--rope-dim", "4"]]
        # under the sanitizers (ATTN_SANITIZED=1, each mpirun ~5x slower)
        # one case: ring_test covers the masks there
        ncases = 1 if os.environ.get("ATTN_SANITIZED") else len(shapes)
        for i, ((qs, ks), extra) in enumerate(list(zip(shapes, opts))[:ncases]):
            np.save(p("q.npy"), rng.standard_normal(qs).astype("<f4"))
            np.save(p("k.npy"), rng.standard_normal(ks).astype("<f4"))
            np.save(p("v.npy"), rng.standard_normal(ks).astype("<f4"))
            np.save(p("do.npy"), rng.standard_normal(qs).astype("<f4"))
            np.save(p("kl.npy"), np.array([37, 20], dtype="<i8"))
            io = ["--q", p("q.npy"), "--k", p("k.npy"), "--v", p("v.npy")] + extra
            r = run(["sdpa"] + io + ["--out", p("o1.npy"), "--lse", p("l1.npy")])
            check(r.returncode == 0, "one-process sdpa case %d: %s" % (i, r.stderr))
            r = run(["sdpa-backward"] + io + ["--dout", p("do.npy"), "--dq", p("dq1.npy"),
                     "--dk", p("dk1.npy"), "--dv", p("dv1.npy")])
            check(r.returncode == 0, "one-process backward case %d: %s" % (i, r.stderr))
            for P, lay in [[(2, "zigzag")], [(3, "contiguous")], [(4, "zigzag")]][i]:
                what = "case %d P=%d %s" % (i, P, lay)
                for f in ["o2", "l2", "dq2", "dk2", "dv2"]:
                    if os.path.exists(p(f + ".npy")):
                        os.remove(p(f + ".npy"))
                r = mpirun(P, ["sdpa", "--ring", lay] + io +
                           ["--out", p("o2.npy"), "--lse", p("l2.npy")])
                check(r.returncode == 0, what + ": " + r.stderr)
                r = mpirun(P, ["sdpa-backward", "--ring", lay] + io +
                           ["--dout", p("do.npy"), "--dq", p("dq2.npy"),
                            "--dk", p("dk2.npy"), "--dv", p("dv2.npy")])
                check(r.returncode == 0, what + " backward: " + r.stderr)
                for a, b in [("o1", "o2"), ("l1", "l2"), ("dq1", "dq2"),
                             ("dk1", "dk2"), ("dv1", "dv2")]:
                    if not check(os.path.exists(p(b + ".npy")), what + ": no " + b):
                        continue
                    x, y = np.load(p(a + ".npy")), np.load(p(b + ".npy"))
                    check(x.shape == y.shape, "%s %s: shape %s vs %s" %
                          (what, b, x.shape, y.shape))
                    if x.shape == y.shape:
                        fin = np.isfinite(x)
                        check(np.array_equal(fin, np.isfinite(y)),
                              what + " " + b + ": -inf rows differ")
                        err = np.max(np.abs(x[fin] - y[fin])) if fin.any() else 0
                        check(err <= 1e-5 * max(1, np.max(np.abs(x[fin]))),
                              "%s %s: max difference %g" % (what, b, err))

        # score modifiers and documents: softcap + causal + ALiBi + sinks +
        # ragged documents (a comma list of key ids too), dL/dsinks included
        B, H, L = 2, 3, 29
        np.save(p("q.npy"), rng.standard_normal((B, H, L, 8)).astype("<f4"))
        np.save(p("k.npy"), rng.standard_normal((B, H, L, 8)).astype("<f4"))
        np.save(p("v.npy"), rng.standard_normal((B, H, L, 8)).astype("<f4"))
        np.save(p("do.npy"), rng.standard_normal((B, H, L, 8)).astype("<f4"))
        np.save(p("sk.npy"), rng.standard_normal(H))
        docs = np.sort(rng.integers(0, 4, size=(B, L)), axis=1).astype("<i8")
        np.save(p("doc.npy"), docs)
        io = ["--q", p("q.npy"), "--k", p("k.npy"), "--v", p("v.npy"),
              "--causal", "top-left", "--softcap", "1.5", "--alibi", "causal",
              "--sinks", p("sk.npy"), "--doc-ids", p("doc.npy")]
        r = run(["sdpa"] + io + ["--out", p("o1.npy"), "--lse", p("l1.npy")])
        check(r.returncode == 0, "one-process sdpa, modifiers: " + r.stderr)
        r = run(["sdpa-backward"] + io + ["--dout", p("do.npy"), "--dq", p("dq1.npy"),
                 "--dk", p("dk1.npy"), "--dv", p("dv1.npy"), "--dsinks", p("ds1.npy")])
        check(r.returncode == 0, "one-process backward, modifiers: " + r.stderr)
        for P, lay in [(2, "zigzag"), (3, "contiguous")]:
            what = "modifiers P=%d %s" % (P, lay)
            r = mpirun(P, ["sdpa", "--ring", lay] + io +
                       ["--out", p("o2.npy"), "--lse", p("l2.npy")])
            check(r.returncode == 0, what + ": " + r.stderr)
            r = mpirun(P, ["sdpa-backward", "--ring", lay] + io +
                       ["--dout", p("do.npy"), "--dq", p("dq2.npy"), "--dk",
                        p("dk2.npy"), "--dv", p("dv2.npy"), "--dsinks", p("ds2.npy")])
            check(r.returncode == 0, what + " backward: " + r.stderr)
            for a, b in [("o1", "o2"), ("l1", "l2"), ("dq1", "dq2"),
                         ("dk1", "dk2"), ("dv1", "dv2"), ("ds1", "ds2")]:
                if not check(os.path.exists(p(b + ".npy")), what + ": no " + b):
                    continue
                x, y = np.load(p(a + ".npy")), np.load(p(b + ".npy"))
                ok = x.shape == y.shape and np.allclose(x, y, rtol=1e-5, atol=1e-5)
                check(ok, "%s %s: ring differs from one process" % (what, b))
            if ncases == 1:
                break

        # errors: every rank agrees, nothing hangs
        np.save(p("s.npy"), rng.standard_normal((5, 4)).astype("<f4"))
        io = ["--q", p("s.npy"), "--k", p("s.npy"), "--v", p("s.npy")]
        r = mpirun(3, ["sdpa", "--ring", "zigzag"] + io + ["--out", p("o3.npy")])
        check(r.returncode != 0 and "3 ranks cut a sequence into 6 chunks but "
              "it has 5 positions" in r.stderr, "P > L: " + r.stderr[-400:])
        check(not os.path.exists(p("o3.npy")), "P > L wrote an output")
        r = mpirun(4, ["sdpa-backward", "--ring", "contiguous"] + io +
                   ["--dout", p("s.npy"), "--dq", p("o3.npy"), "--dk", p("o4.npy"),
                    "--dv", p("o5.npy")], timeout=60)
        check(r.returncode == 0, "P = 4 contiguous over 5 positions: " + r.stderr)
        r = mpirun(6, ["sdpa", "--ring", "contiguous"] + io + ["--out", p("o3.npy")])
        check(r.returncode != 0 and "6 ranks for a sequence of 5 positions"
              in r.stderr, "P > L contiguous: " + r.stderr[-400:])
        # the error cases' own (41, 5) inputs (the loop above may stop early)
        np.save(p("e.npy"), rng.standard_normal((41, 5)).astype("<f4"))
        io = ["--q", p("e.npy"), "--k", p("e.npy"), "--v", p("e.npy")]
        r = run(["sdpa", "--ring", "diagonal"] + io + ["--out", p("o3.npy")])
        check(r.returncode == 2 and "unknown layout 'diagonal'" in r.stderr,
              "bad layout: " + r.stderr)
        r = run(["sdpa", "--ring"])
        check(r.returncode == 2 and "--ring needs a layout" in r.stderr,
              "--ring alone: " + r.stderr)
        r = run(["sdpa", "--ring", "zigzag"] + io + ["--out", p("o3.npy"),
                 "--weights", p("w.npy")])
        check(r.returncode == 2 and "no --weights" in r.stderr, "--weights: " + r.stderr)
        np.save(p("b.npy"), np.zeros((41, 41), dtype="<f4"))
        r = mpirun(2, ["sdpa", "--ring", "zigzag"] + io + ["--out", p("o3.npy"),
                   "--bias", p("b.npy")])
        check(r.returncode != 0 and "mask.bias is set" in r.stderr,
              "--bias under --ring: " + r.stderr[-300:])

        # outputs follow the one-process rule: f16 inputs give f16 outputs
        np.save(p("h.npy"), rng.standard_normal((41, 5)).astype("<f2"))
        hio = ["--q", p("h.npy"), "--k", p("h.npy"), "--v", p("h.npy")]
        r1 = run(["sdpa"] + hio + ["--out", p("h1.npy"), "--causal", "top-left"])
        r = mpirun(2, ["sdpa", "--ring", "zigzag"] + hio + ["--out", p("h2.npy"),
                   "--causal", "top-left"])
        check(r1.returncode == 0 and r.returncode == 0, "f16 ring: " + r.stderr[-300:])
        if r1.returncode == 0 and r.returncode == 0:
            h1, h2 = np.load(p("h1.npy")), np.load(p("h2.npy"))
            check(h1.dtype == np.float16 and h2.dtype == np.float16,
                  "f16 in, f16 out: %s %s" % (h1.dtype, h2.dtype))
            check(np.max(np.abs(h1.astype(np.float32) - h2.astype(np.float32))) <= 2e-3,
                  "f16 ring output equals one process within f16 rounding")

        # ranks that disagree: rank 1 reads other values for q (refused on
        # every rank, nothing written); rank 1 runs without --ring, or
        # stops before joining, or is not attn at all (nobody waits forever)
        e2 = rng.standard_normal((41, 5)).astype("<f4")
        np.save(p("e2.npy"), e2)
        for f in ("o3.npy",):
            if os.path.exists(p(f)):
                os.remove(p(f))
        r = per_rank(2, lambda rank: ["sdpa", "--ring", "zigzag", "--q",
                                      p("e2.npy" if rank == 1 else "e.npy"),
                                      "--k", p("e.npy"), "--v", p("e.npy"),
                                      "--out", p("o3.npy")])
        check(r.returncode != 0 and "rank 1 read other data for q than rank 0"
              in r.stderr, "ranks read different q: rc %d %s"
              % (r.returncode, r.stderr[-400:]))
        check(not os.path.exists(p("o3.npy")), "different inputs wrote an output")
        r = per_rank(2, lambda rank: ["sdpa-backward", "--ring", "zigzag"] + io +
                     ["--dout", p("e2.npy" if rank == 1 else "e.npy"),
                      "--dq", p("o3.npy"), "--dk", p("o4.npy"), "--dv", p("o5.npy")])
        check(r.returncode != 0 and "rank 1 read other data for dout" in r.stderr,
              "ranks read different dout: " + r.stderr[-400:])
        r = per_rank(2, lambda rank: ["sdpa"] + (["--ring", "zigzag"] if rank == 0
                                                 else []) + io + ["--out", p("o3.npy")],
                     timeout=90)
        check(r.returncode != 0 and "rank 1 of 2: 'attn sdpa' runs under mpirun "
              "with 2 ranks but without --ring" in r.stderr,
              "a rank without --ring: rc %d %s" % (r.returncode, r.stderr[-400:]))
        r = per_rank(2, lambda rank: ["sdpa", "--ring", "zigzag"] + io +
                     (["--help"] if rank == 1 else ["--out", p("o3.npy")]), timeout=90)
        check(r.returncode != 0 and "rank 1 of 2 stopped before joining the ring"
              in r.stderr, "a rank that asks for --help: rc %d %s"
              % (r.returncode, r.stderr[-400:]))
        r = per_rank(2, lambda rank: ["sdpa", "--ring", "zigzag"] + io +
                     ["--out", p("o3.npy")], timeout=90, other="true",
                     env={"ATTN_RING_JOIN_TIMEOUT": "3"})
        check(r.returncode != 0 and "rank 0 of 2: not every rank joined the ring "
              "within 3 s" in r.stderr, "a rank that is not attn: rc %d %s"
              % (r.returncode, r.stderr[-400:]))
        check(not os.path.exists(p("o3.npy")), "a failed join wrote an output")

        # the benchmark runs (tiny) and prints its summary lines
        r = mpirun(2, ["bench", "--ring", "zigzag", "--L", "256", "--H", "2",
                       "--D", "16", "--causal", "--backward"])
        check(r.returncode == 0, "bench --ring: " + r.stderr)
        for line in ["ring / compute alone", "balance:", "overlap:",
                     "efficiency", "ring backward: total"]:
            check(line in r.stdout, "bench --ring prints '%s': %s" % (line, r.stdout))
    return summary("cli_ring")


if __name__ == "__main__":
    sys.exit(main())

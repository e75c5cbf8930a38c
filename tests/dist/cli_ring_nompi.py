"""In a build without MPI, `attn sdpa --ring`, `attn sdpa-backward --ring`
and `attn bench --ring` fail with a clear message (and the rest of the CLI
works: the other tests).

usage: cli_ring_nompi.py PATH/TO/attn SOURCE_DIR
"""
import sys

from clitest import check, run, summary

for args in (["sdpa", "--ring", "zigzag", "--q", "q.npy", "--k", "k.npy",
              "--v", "v.npy", "--out", "o.npy"],
             ["sdpa-backward", "--ring", "contiguous", "--q", "q.npy"],
             ["bench", "--ring", "zigzag"]):
    r = run(args)
    check(r.returncode == 2 and "--ring needs attn built with MPI" in r.stderr,
          "%s: rc %d: %s" % (args[0], r.returncode, r.stderr))
sys.exit(summary("cli_ring_nompi"))

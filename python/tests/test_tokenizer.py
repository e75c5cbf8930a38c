"""attn.Tokenizer against Hugging Face tokenizers' ids and texts on the
fixtures of tests/data/bpe/ (made by tests/gen_bpe_fixtures.py), the
streaming decoder, the GGUF-style constructor and its errors."""

import os

import pytest

import attn

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                    "tests", "data", "bpe")


def records(name):
    s = ids = None
    out = []
    for line in open(os.path.join(DATA, name + ".expected")):
        kind, arg = line[0], line[2:].strip()
        if kind == "S":
            s = "" if arg == "-" else bytes.fromhex(arg).decode("utf-8")
        elif kind in "IB":
            ids = [int(x) for x in arg.split()]
            out.append((s, kind == "B", ids))
    return out


@pytest.mark.parametrize("name", ["gpt2", "gpt2p", "llama3", "qwen2", "smollm"])
def test_fixture_ids(name):
    tok = attn.Tokenizer.from_file(os.path.join(DATA, name + ".json"))
    recs = records(name)
    assert len(recs) >= 600
    for s, add, want in recs:
        assert tok.encode(s, add_special_tokens=add) == want, s
        if not add:
            d = tok.stream()
            text = "".join(d.step(i) for i in want) + d.end()
            assert text == tok.decode(want)


def test_from_vocab_and_stream():
    tokens = ["a", "b", "ab", "Ġ", "Ġab", "<|end|>", "<s>", "Ã", "©"]
    tok = attn.Tokenizer.from_vocab(tokens, ["a b", "Ġ ab"],
                                    token_types=[1, 1, 1, 1, 1, 3, 3, 1, 1],
                                    pre="gpt2", bos_id=6, add_bos=True)
    assert tok.encode("ab ab<|end|>") == [6, 2, 4, 5]
    assert tok.encode("ab", add_special_tokens=False) == [2]
    assert tok.get_vocab_size() == 9
    assert tok.id_to_token(4) == "Ġab" and tok.token_to_id("<|end|>") == 5
    assert tok.token_to_id("zz") is None and tok.is_special(5)
    assert tok.decode([6, 2, 4, 5]) == "<s>ab ab<|end|>"
    assert tok.decode([6, 2, 4, 5], skip_special_tokens=True) == "ab ab"
    # "é" is the two bytes C3 A9: the first waits for the second
    assert tok.encode("é", add_special_tokens=False) == [7, 8]
    d = tok.stream()
    assert d.step(7) == "" and d.step(8) == "é" and d.end() == ""
    d = tok.stream()
    assert d.step(7) == "" and d.end() == "\ufffd"
    assert tok.decode([7]) == "\ufffd"


def test_errors():
    with pytest.raises(attn.AttnError) as e:
        attn.Tokenizer.from_vocab(["a"], [], pre="falcon")
    assert e.value.status == attn.ATTN_E_UNSUPPORTED and "falcon" in str(e.value)
    with pytest.raises(attn.AttnError) as e:
        attn.Tokenizer.from_file(os.path.join(DATA, "missing.json"))
    assert e.value.status == attn.ATTN_E_IO
    tok = attn.Tokenizer.from_vocab(["a"], [])
    with pytest.raises(attn.AttnError) as e:
        tok.decode([0, 5])
    assert "5" in str(e.value)
    with pytest.raises(attn.AttnError):
        tok.encode(b"bytes")
    tok.close()
    with pytest.raises(attn.AttnError):
        tok.encode("a")

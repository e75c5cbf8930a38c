"""attn.load_model on the Llama-family fixtures (tests/data/llama/, made by
transformers): logits within 1e-4 of transformers' (relative to the
largest), batched logits, greedy generate equal to transformers' (prompt
then new ids), seeded sampling, attention weights (causal rows summing to
1), bad input."""
import os

import numpy as np
import pytest

import attn

DATA = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "tests",
                    "data", "llama")
NAMES = ["llama_gqa", "llama_mqa_tied_llama3", "mistral_window_linear",
         "qwen2_bias_tied"]


@pytest.mark.parametrize("name", NAMES)
def test_matches_transformers(name):
    d = os.path.join(DATA, name)
    m = attn.load_model(d)
    assert m.config["model_type"] == name.split("_")[0]
    for k in range(3):
        ids = np.load(os.path.join(d, "prompt_%d.npy" % k))
        want = np.load(os.path.join(d, "logits_%d.npy" % k))
        z = m.logits(ids)
        assert z.shape == want.shape
        assert np.abs(z - want).max() <= 1e-4 * np.abs(want).max()
        greedy = np.load(os.path.join(d, "greedy_%d.npy" % k)).tolist()
        assert m.generate(ids, max_new_tokens=10) == greedy
    # text in, text out through the folder's tokenizer.json (HF's ids)
    import json
    with open(os.path.join(d, "texts.json")) as f:
        for rec in json.load(f):
            assert m.encode(rec["text"]) == rec["ids"]
            out = m.generate(rec["text"], max_new_tokens=10)
            assert out == rec["greedy"]
            assert m.decode(out[len(rec["ids"]):]) == rec["greedy_text"]
    # a batch of two equal-length prompts gives each one's logits
    ids = np.load(os.path.join(d, "prompt_0.npy"))
    zb = m.logits(np.stack([ids, ids[::-1]]))
    assert zb.shape == (2, len(ids), m.vocab_size)
    # (the products cut rows into other blocks: equal to f32 rounding)
    np.testing.assert_allclose(zb[0], m.logits(ids), rtol=0, atol=1e-5)
    np.testing.assert_allclose(zb[1], m.logits(ids[::-1]), rtol=0, atol=1e-5)


def test_sampling_attention_errors(tmp_path):
    m = attn.load_model(os.path.join(DATA, "llama_gqa"))
    p = [1, 17, 33, 5]
    a = m.generate(p, max_new_tokens=8, do_sample=True, temperature=0.7,
                   top_k=10, top_p=0.9, seed=3, eos_token_id=-1)
    assert a[:4] == p and len(a) == 12
    assert a == m.generate(p, max_new_tokens=8, do_sample=True,
                           temperature=0.7, top_k=10, top_p=0.9, seed=3,
                           eos_token_id=-1)
    seen = []
    m.generate(p, max_new_tokens=8, callback=lambda i: seen.append(i) or
               len(seen) == 3, eos_token_id=-1)
    assert len(seen) == 3
    w = m.attention(p)
    assert w.shape == (2, 4, 4, 4)
    np.testing.assert_allclose(w.sum(-1), 1, atol=1e-5)
    assert np.all(np.triu(w, 1) == 0)
    with pytest.raises(attn.AttnError, match="outside"):
        m.logits([1, 300])
    with pytest.raises(attn.AttnError, match="top_p"):
        m.generate(p, do_sample=True, top_p=1.5)
    (tmp_path / "config.json").write_text('{"model_type": "gemma"}')
    with pytest.raises(attn.AttnError, match="model_type 'gemma'"):
        attn.llama.LlamaModel(str(tmp_path))
    with pytest.raises(attn.AttnError, match="cannot open"):
        attn.llama.LlamaModel(str(tmp_path / "nothing"))

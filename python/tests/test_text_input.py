"""Text and sizes the binding hands to C: a NUL inside a str (C would stop
reading there), a lone surrogate (no UTF-8 form), and a KV-cache read
larger than the cache, each refused with AttnError before C or NumPy sees
it."""

import json
import os
import struct

import numpy as np
import pytest

import attn
from conftest import refused


def tiny_bert(d):
    """A 1-layer BERT folder (config.json, vocab.txt, model.safetensors)."""
    rng = np.random.default_rng(3)
    E, F, V, P = 4, 8, 10, 16
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "bert", "hidden_size": E, "num_hidden_layers": 1,
                   "num_attention_heads": 2, "intermediate_size": F,
                   "vocab_size": V, "max_position_embeddings": P,
                   "type_vocab_size": 2, "hidden_act": "gelu",
                   "layer_norm_eps": 1e-12}, f)
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat",
                           "sat", "on", "mat", "."]) + "\n")
    t = {"embeddings.word_embeddings.weight": (V, E),
         "embeddings.position_embeddings.weight": (P, E),
         "embeddings.token_type_embeddings.weight": (2, E),
         "embeddings.LayerNorm.weight": (E,), "embeddings.LayerNorm.bias": (E,)}
    p = "encoder.layer.0."
    for k in ("query", "key", "value"):
        t[p + "attention.self.%s.weight" % k] = (E, E)
        t[p + "attention.self.%s.bias" % k] = (E,)
    for q, shape in (("attention.output.dense", (E, E)),
                     ("intermediate.dense", (F, E)), ("output.dense", (E, F))):
        t[p + q + ".weight"] = shape
        t[p + q + ".bias"] = shape[:1]
    for q in ("attention.output.LayerNorm", "output.LayerNorm"):
        t[p + q + ".weight"] = (E,)
        t[p + q + ".bias"] = (E,)
    header, blobs, off = {}, [], 0
    for name, shape in t.items():
        b = rng.normal(size=shape).astype(np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return d


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    m = attn.load_model(tiny_bert(str(tmp_path_factory.mktemp("bert"))))
    yield m
    m.close()


def test_text_with_a_nul_is_refused_not_cut(model):
    assert model.tokenize("the cat sat") == ["[CLS]", "the", "cat", "sat", "[SEP]"]
    # once "the cat\x00 sat" tokenized as "the cat": the rest silently lost
    for call in (lambda: model.tokenize("the cat\x00 sat"),
                 lambda: model.encode("the cat", "sat\x00 on"),
                 lambda: model.embed(["the cat", "the\x00 mat"]),
                 lambda: model.attention("\x00")):
        refused(call, "NUL")
    e = refused(lambda: model.tokenize("the cat\x00 sat"), "text", "index 7")
    assert "\\x00" in str(e)  # quoted escaped


def test_lone_surrogate_is_an_attn_error(model):
    # once a UnicodeEncodeError from str.encode
    e = refused(lambda: model.tokenize("the \udc80 cat"), "lone surrogate",
                "index 4", "text")
    assert "\\udc80" in str(e)
    refused(lambda: model.embed(["ok", "bad \ud800"]), "texts[1]", "surrogate")


def test_labels_with_a_nul_or_a_surrogate_are_refused(tmp_path):
    w = np.full((2, 2), 0.5, np.float32)
    path = str(tmp_path / "w.png")
    refused(lambda: attn.heatmap(w, path, x_tokens=["a", "b\x00c"]), "NUL",
            "x_tokens[1]")
    refused(lambda: attn.heatmap(w, path, title="t\udcff"), "surrogate", "title")
    assert not os.path.exists(path)


def test_kv_cache_read_is_checked_before_allocating():
    c = attn.KVCache(batch=1, kv_heads=2, capacity=8, head_dim=4)
    k = np.ones((1, 2, 3, 4), np.float32)
    c.append(k, k)
    # once NumPy's MemoryError: (2, 2**40, 4) floats allocated before C
    # could say that the entry holds 3 positions
    refused(lambda: c.read(0, 0, 2**40), "entry 0", "holds 3",
            status=attn.ATTN_E_SHAPE)
    refused(lambda: c.read(0, 2, 2), "holds 3", status=attn.ATTN_E_SHAPE)
    refused(lambda: c.doc_ids(0, 0, 2**40), "holds 3", status=attn.ATTN_E_SHAPE)
    refused(lambda: c.read(1), "entry 1", status=attn.ATTN_E_SHAPE)
    kk, vv = c.read(0, 1, 2)
    assert kk.shape == (2, 2, 4) and vv.shape == (2, 2, 4)
    assert c.read(0, 3, 0)[0].shape == (2, 0, 4)
    c.close()

"""Pretrained BERT-family models from their files (model.safetensors,
config.json, vocab.txt), run by libattn with no PyTorch::

    m = attn.load_model("path/to/all-MiniLM-L6-v2")
    e = m.embed(["A cat sat.", "A dog ran."])     # (2, 384) float32, L2-normalized
    m16 = attn.load_model("path/to/all-MiniLM-L6-v2", dtype="bfloat16")  # bf16 products
    toks = m.tokenize("The cat sat")              # ['[CLS]', 'the', 'cat', 'sat', '[SEP]']
    w = m.attention("The cat sat")                # (layers, heads, n, n) float32

The C side is include/attn_pretrained.h (attn_bert_*).
"""

import ctypes
import json
import os
from ctypes import byref

import numpy as np

from . import _lib
from ._lib import ATTN_E_INVALID, fail
from .llama import LlamaModel

_i32p = ctypes.POINTER(ctypes.c_int32)
_i64p = ctypes.POINTER(ctypes.c_int64)
_fp = ctypes.POINTER(ctypes.c_float)
_vp = ctypes.c_void_p

_PROTOS = {
    "attn_bert_load": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_vp)]),
    "attn_bert_free": (None, [_vp]),
    "attn_bert_tokenizer": (_vp, [_vp]),
    "attn_bert_param_count": (ctypes.c_int64, [_vp]),
    "attn_bert_encode": (ctypes.c_int, [_vp, ctypes.c_char_p, ctypes.c_char_p, _i32p,
                                        _i32p, ctypes.c_int64, _i64p]),
    "attn_bert_forward": (ctypes.c_int, [_vp, ctypes.c_int64, ctypes.c_int64, _i32p,
                                         _i32p, _i64p, ctypes.c_int, _fp, _fp]),
    "attn_bert_pool": (ctypes.c_int, [_vp, ctypes.c_int64, ctypes.c_int64, _fp,
                                      _i64p, _fp]),
    "attn_bert_embed_texts": (ctypes.c_int, [_vp, ctypes.POINTER(ctypes.c_char_p),
                                             ctypes.c_int64, ctypes.c_int, _fp]),
    "attn_wordpiece_token": (ctypes.c_char_p, [_vp, ctypes.c_int64]),
    "attn_bert_set_dtype": (ctypes.c_int, [_vp, ctypes.c_int]),
    "attn_bert_get_dtype": (ctypes.c_int, [_vp]),
}

# dtype= of the models: PyTorch's names and attn's
_DTYPES = {"float32": _lib.ATTN_F32, "f32": _lib.ATTN_F32,
           "bfloat16": _lib.ATTN_BF16, "bf16": _lib.ATTN_BF16}
for _name, (_res, _args) in _PROTOS.items():
    _lib.lib.declare(_name, _res, _args)


class _Config(_lib.Struct):
    """The leading fields of attn_bert_config (read-only mirror)."""
    _fields_ = [(n, ctypes.c_int64) for n in (
        "vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
        "max_position", "type_vocab_size", "pad_token_id", "max_seq_length")] + [
        ("layer_norm_eps", ctypes.c_double)]


_lib.lib.declare("attn_bert_get_config", ctypes.POINTER(_Config), [_vp])


def _ptr(a, t):
    return a.ctypes.data_as(t) if a is not None else None


def _text(s, name):
    return _lib.utf8(s, name)


def _dtype_code(dtype):
    name = getattr(dtype, "name", dtype)  # np.dtype("float32") and strings
    if not isinstance(name, str) or name not in _DTYPES:
        fail(_lib.ATTN_E_DTYPE, "dtype %r: the model's linear maps run in "
             "'float32' or 'bfloat16'" % (dtype,))
    return _DTYPES[name]


class BertModel(_lib.Owned):
    """A loaded model; free with close() or by dropping it. dtype
    "bfloat16" runs its linear maps on bf16 products with f32 accumulation
    (as PyTorch's autocast to bfloat16) where the CPU has AVX512_BF16;
    the dtype attribute says which runs ("float32" elsewhere)."""

    _free = "attn_bert_free"

    def __init__(self, path, dtype="float32"):
        code = _dtype_code(dtype)
        h = _vp()
        _lib.call("attn_bert_load", str(path).encode(), byref(h))
        self._h = h
        _lib.call("attn_bert_set_dtype", h, code)
        c = _lib.lib.attn_bert_get_config(h).contents
        self.config = {f: getattr(c, f) for f, _ in _Config._fields_}
        self.num_layers = c.num_layers
        self.num_heads = c.num_heads
        self.hidden_size = c.hidden_size
        self.max_seq_length = c.max_seq_length
        self._tok = _lib.lib.attn_bert_tokenizer(h)


    def _handle(self):
        if not getattr(self, "_h", None):
            fail(ATTN_E_INVALID, "the model was closed")
        return self._h

    @property
    def dtype(self):
        """The products the linear maps run: "float32" or "bfloat16"."""
        code = _lib.lib.attn_bert_get_dtype(self._handle())
        return "bfloat16" if code == _lib.ATTN_BF16 else "float32"

    def param_count(self):
        return _lib.lib.attn_bert_param_count(self._handle())

    def encode(self, text, text_b=None):
        """(ids, type_ids) int32 arrays of [CLS] text [SEP] (text_b [SEP]),
        cut to max_seq_length."""
        a = _text(text, "text")
        b = _text(text_b, "text_b") if text_b is not None else None
        cap = self.max_seq_length
        ids = np.zeros(cap, np.int32)
        types = np.zeros(cap, np.int32)
        n = ctypes.c_int64()
        _lib.call("attn_bert_encode", self._handle(), a, b, _ptr(ids, _i32p),
                  _ptr(types, _i32p), cap, byref(n))
        return ids[:n.value].copy(), types[:n.value].copy()

    def tokenize(self, text, text_b=None):
        """The word pieces of text (with [CLS] and [SEP]) as strings."""
        ids, _ = self.encode(text, text_b)
        return [_lib.lib.attn_wordpiece_token(self._tok, int(i)).decode("utf-8")
                for i in ids]

    def forward(self, ids, type_ids=None, lengths=None, weights=False, threads=0):
        """Hidden states (B, L, E) of ids (B, L) (and, with weights=True,
        the attention weights (N, B, H, L, L)). lengths (B): tokens past
        them are padding."""
        ids = np.ascontiguousarray(ids, np.int32)
        if ids.ndim == 1:
            ids = ids[None]
        B, L = ids.shape
        tt = None if type_ids is None else np.ascontiguousarray(type_ids, np.int32).reshape(B, L)
        ln = None if lengths is None else np.ascontiguousarray(lengths, np.int64).reshape(B)
        hid = np.empty((B, L, self.hidden_size), np.float32)
        w = np.empty((self.num_layers, B, self.num_heads, L, L), np.float32) if weights else None
        _lib.call("attn_bert_forward", self._handle(), B, L, _ptr(ids, _i32p), _ptr(tt, _i32p),
                  _ptr(ln, _i64p), int(threads), _ptr(hid, _fp), _ptr(w, _fp))
        return (hid, w) if weights else hid

    def embed(self, texts, threads=0):
        """Sentence embeddings (N, E) float32 of a list of texts (or one),
        mean-pooled and L2-normalized, in the order given."""
        if isinstance(texts, str):
            texts = [texts]
        enc = [_text(t, "texts[%d]" % i) for i, t in enumerate(texts)]
        if not enc:
            fail(ATTN_E_INVALID, "texts is empty")
        arr = (ctypes.c_char_p * len(enc))(*enc)
        out = np.empty((len(enc), self.hidden_size), np.float32)
        _lib.call("attn_bert_embed_texts", self._handle(), arr, len(enc), int(threads),
                  _ptr(out, _fp))
        return out

    def attention(self, text, text_b=None, threads=0):
        """Attention weights (layers, heads, n, n) float32 of text (a pair
        with text_b), row = query; tokenize(text) names the n positions.
        Draw or summarize them with axes=("layer", "head") (attn.heatmap,
        attn.stats, attn.html): a rank-4 array is (batch, head) otherwise."""
        ids, types = self.encode(text, text_b)
        _, w = self.forward(ids[None], types[None], weights=True, threads=threads)
        return w[:, 0]


def load_model(path, dtype=None):
    """Loads a model folder by its config.json's model_type: a BERT-family
    one (config.json, model.safetensors, vocab.txt) as a BertModel with
    embed(texts), attention(text) and tokenize(text); a Llama-family one
    (llama, mistral, qwen2) as an attn.llama.LlamaModel with logits(ids),
    generate(ids, ...) and attention(ids); a GGUF file (llama architecture)
    as a LlamaModel too, with chat(messages). dtype ("float32" or
    "bfloat16", BERT-family models): the precision of the linear maps'
    products."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4) if os.path.isfile(path) else b""
    except (OSError, TypeError, ValueError):
        magic = b""  # the C loader says what is wrong
    if magic == b"GGUF":
        if dtype is not None:
            fail(_lib.ATTN_E_UNSUPPORTED, "dtype= applies to BERT-family "
                 "models; %r is a GGUF file" % (str(path),))
        return LlamaModel(path)
    try:
        with open(os.path.join(str(path), "config.json"), "rb") as f:
            kind = json.loads(f.read().decode("utf-8", "replace")).get("model_type")
    except (OSError, ValueError, AttributeError):
        kind = None  # the C loader says what is wrong
    if kind in ("llama", "mistral", "qwen2"):
        if dtype is not None:
            fail(_lib.ATTN_E_UNSUPPORTED, "dtype= applies to BERT-family "
                 "models; %r is a %s model" % (str(path), kind))
        return LlamaModel(path)
    return BertModel(path, dtype if dtype is not None else "float32")

"""Byte-level BPE tokenizers (GPT-2, Llama 3, Qwen2, SmolLM2) run by
libattn, equal to Hugging Face tokenizers::

    tok = attn.Tokenizer.from_file("tokenizer.json")
    ids = tok.encode("Hello, world!")        # list of int, BOS where the file says
    text = tok.decode(ids)                   # "Hello, world!" (with the BOS's text)
    d = tok.stream()                         # text token by token
    pieces = [d.step(i) for i in ids] + [d.end()]

The C side is include/attn_tokenizer.h (attn_bpe_*).
"""

import ctypes
from ctypes import byref

from . import _lib
from ._lib import ATTN_E_INVALID, fail

_vp = ctypes.c_void_p
_i32p = ctypes.POINTER(ctypes.c_int32)
_sz = ctypes.c_size_t


class _Vocab(_lib.Struct):
    """attn_bpe_vocab."""
    _fields_ = [("n_tokens", ctypes.c_int64),
                ("tokens", ctypes.POINTER(ctypes.c_char_p)),
                ("token_types", _i32p),
                ("n_merges", ctypes.c_int64),
                ("merges", ctypes.POINTER(ctypes.c_char_p)),
                ("pre", ctypes.c_char_p),
                ("bos_id", ctypes.c_int64),
                ("eos_id", ctypes.c_int64),
                ("add_bos", ctypes.c_int),
                ("add_eos", ctypes.c_int),
                ("ignore_merges", ctypes.c_int)]


class _Stream(_lib.Struct):
    """attn_bpe_stream."""
    _fields_ = [("held", ctypes.c_ubyte * 4), ("n_held", ctypes.c_int)]


_lib.MIRRORED.update({"attn_bpe_vocab": _Vocab, "attn_bpe_stream": _Stream})

_PROTOS = {
    "attn_bpe_load": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_vp)]),
    "attn_bpe_from_vocab": (ctypes.c_int, [ctypes.POINTER(_Vocab),
                                           ctypes.POINTER(_vp)]),
    "attn_bpe_vocab_init": (None, [ctypes.POINTER(_Vocab)]),
    "attn_bpe_free": (None, [_vp]),
    "attn_bpe_vocab_size": (ctypes.c_int64, [_vp]),
    "attn_bpe_token": (ctypes.c_char_p, [_vp, ctypes.c_int64]),
    "attn_bpe_is_special": (ctypes.c_int, [_vp, ctypes.c_int64]),
    "attn_bpe_id": (ctypes.c_int, [_vp, ctypes.c_char_p, _i32p]),
    "attn_bpe_encode": (ctypes.c_int, [_vp, ctypes.c_char_p, _sz, ctypes.c_uint,
                                       _i32p, ctypes.c_int64,
                                       ctypes.POINTER(ctypes.c_int64)]),
    "attn_bpe_decode": (ctypes.c_int, [_vp, _i32p, ctypes.c_int64, ctypes.c_int,
                                       ctypes.c_char_p, _sz,
                                       ctypes.POINTER(_sz)]),
    "attn_bpe_stream_max": (_sz, [_vp]),
    "attn_bpe_stream_next": (ctypes.c_int, [_vp, ctypes.POINTER(_Stream),
                                            ctypes.c_int32, ctypes.c_int,
                                            ctypes.c_char_p, _sz,
                                            ctypes.POINTER(_sz)]),
    "attn_bpe_stream_end": (ctypes.c_int, [ctypes.POINTER(_Stream),
                                           ctypes.c_char_p, _sz,
                                           ctypes.POINTER(_sz)]),
}
for _name, (_res, _args) in _PROTOS.items():
    _lib.lib.declare(_name, _res, _args)
_lib.lib.check_layout()

PARSE_SPECIAL = 1
ADD_SPECIAL = 2


def _strs(items, name):
    out = []
    for i, s in enumerate(items):
        if not isinstance(s, str):
            fail(ATTN_E_INVALID, "%s[%d] must be a str, not %s", name, i,
                 type(s).__name__)
        out.append(s.encode("utf-8"))
    return (ctypes.c_char_p * max(len(out), 1))(*out)


class Tokenizer(_lib.Owned):
    """A byte-level BPE tokenizer; free with close() or by dropping it."""

    _free = "attn_bpe_free"  # one a model owns (_borrowed) is freed with it

    def __init__(self, handle):
        self._h = handle

    @classmethod
    def from_file(cls, path):
        """Reads a Hugging Face tokenizer.json."""
        h = _vp()
        _lib.call("attn_bpe_load", _lib.fspath(path), byref(h))
        return cls(h)

    @classmethod
    def from_vocab(cls, tokens, merges, token_types=None, pre="gpt2",
                   bos_id=None, eos_id=None, add_bos=False, add_eos=False,
                   ignore_merges=None):
        """From the arrays a GGUF file's metadata gives (tokenizer.ggml.
        tokens, merges "left right", token_type, pre)."""
        v = _Vocab()
        _lib.lib.attn_bpe_vocab_init(byref(v))
        toks = _strs(tokens, "tokens")
        mrg = _strs(merges, "merges")
        v.n_tokens = len(tokens)
        v.tokens = toks
        v.n_merges = len(merges)
        v.merges = mrg
        types = None
        if token_types is not None:
            if len(token_types) != len(tokens):
                fail(ATTN_E_INVALID, "%d token_types for %d tokens",
                     len(token_types), len(tokens))
            types = (ctypes.c_int32 * max(len(tokens), 1))(*map(int, token_types))
            v.token_types = types
        v.pre = str(pre).encode("utf-8")
        v.bos_id = -1 if bos_id is None else int(bos_id)
        v.eos_id = -1 if eos_id is None else int(eos_id)
        v.add_bos = int(bool(add_bos))
        v.add_eos = int(bool(add_eos))
        if ignore_merges is not None:
            v.ignore_merges = int(bool(ignore_merges))
        h = _vp()
        _lib.call("attn_bpe_from_vocab", byref(v), byref(h))
        return cls(h)


    def _handle(self):
        if not getattr(self, "_h", None):
            fail(ATTN_E_INVALID, "the tokenizer was closed")
        return self._h

    def get_vocab_size(self):
        return _lib.lib.attn_bpe_vocab_size(self._handle())

    def id_to_token(self, id):
        """The token of id as the vocabulary writes it, or None."""
        s = _lib.lib.attn_bpe_token(self._handle(), int(id))
        return None if s is None else s.decode("utf-8")

    def token_to_id(self, token):
        """The id of token, or None."""
        i = ctypes.c_int32()
        if _lib.lib.attn_bpe_id(self._handle(), token.encode("utf-8"), byref(i)):
            return None
        return i.value

    def is_special(self, id):
        return bool(_lib.lib.attn_bpe_is_special(self._handle(), int(id)))

    def encode(self, text, add_special_tokens=True, split_special_tokens=False):
        """The ids of text: special tokens in it are theirs (unless
        split_special_tokens), and the post-processor's BOS / EOS are added
        with add_special_tokens, as transformers' encode does."""
        if not isinstance(text, str):
            fail(ATTN_E_INVALID, "text must be a str, not %s", type(text).__name__)
        b = text.encode("utf-8", "surrogatepass")
        flags = (0 if split_special_tokens else PARSE_SPECIAL) | (
            ADD_SPECIAL if add_special_tokens else 0)
        cap = len(b) + 8
        for _ in range(2):
            ids = (ctypes.c_int32 * cap)()
            n = ctypes.c_int64()
            _lib.call("attn_bpe_encode", self._handle(), b, len(b), flags, ids,
                      cap, byref(n))
            if n.value <= cap:
                return list(ids[:n.value])
            cap = n.value
        fail(ATTN_E_INVALID, "the number of ids changed between two calls")

    def _ids(self, ids):
        ids = [int(i) for i in ids]
        return (ctypes.c_int32 * max(len(ids), 1))(*ids), len(ids)

    def decode(self, ids, skip_special_tokens=False):
        """The text of ids (bytes that are not UTF-8 become U+FFFD)."""
        arr, n = self._ids(ids)
        size = _sz()
        _lib.call("attn_bpe_decode", self._handle(), arr, n,
                  int(bool(skip_special_tokens)), None, 0, byref(size))
        buf = ctypes.create_string_buffer(size.value + 1)
        _lib.call("attn_bpe_decode", self._handle(), arr, n,
                  int(bool(skip_special_tokens)), buf, size.value + 1,
                  byref(size))
        return buf.raw[:size.value].decode("utf-8")

    def stream(self, skip_special_tokens=False):
        """A decoder fed one id at a time: step(id) returns the text that id
        completes (bytes of an unfinished character wait), end() the rest."""
        return _Decoder(self, skip_special_tokens)


class _Decoder:
    def __init__(self, tok, skip):
        self._tok = tok
        self._skip = int(bool(skip))
        self._s = _Stream()
        self._cap = _lib.lib.attn_bpe_stream_max(tok._handle())
        self._buf = ctypes.create_string_buffer(max(self._cap, 3))

    def step(self, id):
        n = _sz()
        _lib.call("attn_bpe_stream_next", self._tok._handle(), byref(self._s),
                  int(id), self._skip, self._buf, self._cap, byref(n))
        return self._buf.raw[:n.value].decode("utf-8")

    def end(self):
        n = _sz()
        _lib.call("attn_bpe_stream_end", byref(self._s), self._buf, 3, byref(n))
        return self._buf.raw[:n.value].decode("utf-8")

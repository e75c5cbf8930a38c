"""Llama-family causal language models (Llama, Mistral, Qwen2) from a
transformers folder (config.json, model.safetensors) or a GGUF file, run by
libattn::

    m = attn.load_model("path/to/model")          # a LlamaModel
    z = m.logits([1, 17, 33])                      # (3, vocab) float32
    ids = m.generate([1, 17, 33], max_new_tokens=8)  # prompt + new ids
    w = m.attention([1, 17, 33])                   # (layers, heads, n, n)
    m.chat([{"role": "user", "content": "What is 2+2?"}])  # the reply

generate returns the prompt followed by the new ids, as transformers'
generate does; do_sample=True draws with temperature, top_k and top_p
from seed (the same ids on any thread count). m.session() keeps a
conversation's KV cache across calls (feed, generate). The C side is
include/attn_pretrained.h (attn_llama_*).
"""

import ctypes
import os
from ctypes import byref

import numpy as np

from . import _lib
from ._lib import ATTN_E_INVALID, ATTN_E_SHAPE, fail
from .chat import ChatTemplate
from .tokenizer import Tokenizer

_i32p = ctypes.POINTER(ctypes.c_int32)
_i64p = ctypes.POINTER(ctypes.c_int64)
_fp = ctypes.POINTER(ctypes.c_float)
_vp = ctypes.c_void_p


class Config(_lib.Struct):
    _c_name_ = "attn_llama_config"
    _fields_ = [("model_type", ctypes.c_char * 16),
                ("vocab_size", ctypes.c_int64), ("hidden_size", ctypes.c_int64),
                ("num_layers", ctypes.c_int64), ("num_heads", ctypes.c_int64),
                ("num_kv_heads", ctypes.c_int64),
                ("intermediate_size", ctypes.c_int64),
                ("max_position", ctypes.c_int64),
                ("sliding_window", ctypes.c_int64),
                ("rms_norm_eps", ctypes.c_double), ("rope", _lib.Rope),
                ("tie_word_embeddings", ctypes.c_int),
                ("attention_bias", ctypes.c_int),
                ("bos_token_id", ctypes.c_int64),
                ("eos_token_id", ctypes.c_int64),
                ("stored_dtype", ctypes.c_int)]


class GenOpts(_lib.Struct):
    _c_name_ = "attn_llama_gen_opts"
    _fields_ = [("max_new_tokens", ctypes.c_int64), ("do_sample", ctypes.c_int),
                ("temperature", ctypes.c_double), ("top_k", ctypes.c_int64),
                ("top_p", ctypes.c_double), ("seed", ctypes.c_uint64),
                ("eos_token_id", ctypes.c_int64), ("threads", ctypes.c_int)]


_lib.MIRRORED.update({"attn_llama_config": Config,
                      "attn_llama_gen_opts": GenOpts})

_TOKEN_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32)
_PROTOS = {
    "attn_llama_load": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_vp)]),
    "attn_llama_free": (None, [_vp]),
    "attn_llama_get_config": (ctypes.POINTER(Config), [_vp]),
    "attn_llama_param_count": (ctypes.c_int64, [_vp]),
    "attn_llama_forward": (ctypes.c_int, [_vp, ctypes.c_int64, ctypes.c_int64,
                                          _i32p, ctypes.c_int, _fp, _fp]),
    "attn_llama_gen_opts_init": (None, [ctypes.POINTER(GenOpts)]),
    "attn_llama_generate": (ctypes.c_int, [
        _vp, _i32p, ctypes.c_int64, ctypes.POINTER(GenOpts), _i32p,
        ctypes.c_int64, _i64p, _TOKEN_FN, _vp]),
    "attn_llama_tokenizer": (_vp, [_vp]),
    "attn_llama_chat_template": (ctypes.c_char_p, [_vp]),
    "attn_llama_session_create": (ctypes.c_int, [_vp, ctypes.c_int64,
                                                 ctypes.c_int,
                                                 ctypes.POINTER(_vp)]),
    "attn_llama_session_free": (None, [_vp]),
    "attn_llama_session_length": (ctypes.c_int64, [_vp]),
    "attn_llama_session_capacity": (ctypes.c_int64, [_vp]),
    "attn_llama_session_reset": (ctypes.c_int, [_vp]),
    "attn_llama_session_feed": (ctypes.c_int, [_vp, _i32p, ctypes.c_int64,
                                               _fp]),
    "attn_llama_session_generate": (ctypes.c_int, [
        _vp, ctypes.POINTER(GenOpts), _i32p, ctypes.c_int64, _i64p,
        _TOKEN_FN, _vp]),
}
for _name, (_res, _args) in _PROTOS.items():
    _lib.lib.declare(_name, _res, _args)
_lib.lib.check_layout()


def _ids(ids, V):
    a = np.asarray(ids)
    if a.dtype.kind not in "iu" and a.size:
        fail(ATTN_E_INVALID, "ids must be integers, not %s", a.dtype)
    if a.ndim not in (1, 2) or a.size == 0:
        fail(ATTN_E_SHAPE, "ids must be a non-empty (L,) or (B, L) array, not "
             "shape %s", a.shape)
    if a.size and (a.min() < 0 or a.max() >= V):
        fail(ATTN_E_INVALID, "an id is outside [0, vocab_size = %d)", V)
    return _lib.c_array(a.astype(np.int32), np.int32)


def _gen_opts(max_new_tokens, do_sample, temperature, top_k, top_p, seed,
              eos_token_id, threads):
    o = GenOpts()
    _lib.lib.attn_llama_gen_opts_init(byref(o))
    o.max_new_tokens = int(max_new_tokens)
    o.do_sample = 1 if do_sample else 0
    o.temperature = float(temperature)
    o.top_k = 0 if top_k is None else int(top_k)
    o.top_p = 1.0 if top_p is None else float(top_p)
    o.seed = int(seed)
    if eos_token_id is not None:
        o.eos_token_id = int(eos_token_id)
    o.threads = int(threads)
    return o


def _token_fn(callback):
    if not callback:
        return ctypes.cast(None, _TOKEN_FN)
    return _TOKEN_FN(lambda _u, i: 1 if callback(int(i)) else 0)


class LlamaModel(_lib.Owned):
    """A loaded Llama-family model; see the module's docstring."""

    _free = "attn_llama_free"

    def __init__(self, path, threads=0):
        h = _vp()
        _lib.call("attn_llama_load", str(path).encode(), byref(h))
        self._h = h
        self.threads = threads
        c = _lib.lib.attn_llama_get_config(h).contents
        self.config = {f: getattr(c, f) for f, _ in Config._fields_
                       if f not in ("rope",)}
        self.config["model_type"] = c.model_type.decode()
        self.config["rope_theta"] = c.rope.theta
        self.path = str(path)
        th = _lib.lib.attn_llama_tokenizer(h)
        self.tokenizer = None
        if th:  # the model's own (folder's tokenizer.json, GGUF metadata)
            self.tokenizer = Tokenizer(_vp(th))
            self.tokenizer._borrowed = True
        self._template = None
        self._chat = None  # (session, messages so far, ended at eos)

    def _tok(self):
        if self.tokenizer is None:
            fail(ATTN_E_INVALID, "this model has no tokenizer (a folder "
                 "without tokenizer.json): pass token ids")
        return self.tokenizer

    def encode(self, text):
        """The ids of text, with special tokens only where the tokenizer's
        own post-processor adds them (a BOS for Llama 3, none for Qwen2)."""
        return list(self._tok().encode(text))

    def decode(self, ids, skip_special_tokens=True):
        """The text of ids (special tokens left out unless asked)."""
        return self._tok().decode(list(ids),
                                  skip_special_tokens=skip_special_tokens)

    def _as_ids(self, x):
        return self.encode(x) if isinstance(x, str) else x

    def close(self):
        """Frees the model, its tokenizer and its chat session."""
        if getattr(self, "_chat", None):
            self._chat[0].close()
        self._chat = None
        if getattr(self, "tokenizer", None) is not None:
            self.tokenizer.close()
        if getattr(self, "_template", None) is not None:
            self._template.close()
        super().close()

    @property
    def vocab_size(self):
        return self.config["vocab_size"]

    def param_count(self):
        return int(_lib.lib.attn_llama_param_count(self._h))

    def _forward(self, a, weights):
        B, L = (1,) + a.shape if a.ndim == 1 else a.shape
        z = np.empty((B, L, self.vocab_size), np.float32)
        w = None
        if weights:
            c = self.config
            w = np.empty((c["num_layers"], B, c["num_heads"], L, L), np.float32)
        _lib.call("attn_llama_forward", self._h, B, L,
                  a.ctypes.data_as(_i32p), int(self.threads),
                  z.ctypes.data_as(_fp),
                  w.ctypes.data_as(_fp) if w is not None else None)
        return z, w

    def logits(self, ids):
        """Next-token logits: (L, vocab) for (L,) ids (or a text), (B, L,
        vocab) for (B, L)."""
        a = _ids(self._as_ids(ids), self.vocab_size)
        z, _ = self._forward(a, False)
        return z[0] if a.ndim == 1 else z

    def attention(self, ids):
        """Every layer's causal attention weights over (L,) ids or a text:
        (layers, heads, L, L) float32."""
        a = _ids(self._as_ids(ids), self.vocab_size)
        if a.ndim != 1:
            fail(ATTN_E_SHAPE, "attention takes one sequence of ids")
        _, w = self._forward(a, True)
        return w[:, 0]

    def generate(self, ids, max_new_tokens=20, do_sample=False,
                 temperature=1.0, top_k=None, top_p=None, seed=0,
                 eos_token_id=None, callback=None):
        """The prompt ids followed by the new ids (list of int), stopping
        after the end-of-sequence id (ids may be a text: it is encoded).
        callback(id) sees each new id; a true return stops."""
        a = _ids(self._as_ids(ids), self.vocab_size)
        if a.ndim != 1:
            fail(ATTN_E_SHAPE, "generate takes one sequence of ids")
        o = _gen_opts(max_new_tokens, do_sample, temperature, top_k, top_p,
                      seed, eos_token_id, self.threads)
        cap = max(int(max_new_tokens), 1)
        out = np.zeros(cap, np.int32)
        n = ctypes.c_int64(0)
        fn = _token_fn(callback)
        _lib.call("attn_llama_generate", self._h, a.ctypes.data_as(_i32p),
                  a.size, byref(o), out.ctypes.data_as(_i32p), cap, byref(n),
                  fn, None)
        return [int(x) for x in a] + [int(x) for x in out[:n.value]]

    def session(self, max_len=None):
        """A Session: one conversation whose KV cache stays across calls
        (at most max_len tokens; default: max_position_embeddings, at most
        4096)."""
        return Session(self, max_len)

    @property
    def chat_template(self):
        """The model's ChatTemplate: a GGUF file's tokenizer.chat_template,
        a folder's tokenizer_config.json chat_template; an error says why
        there is none."""
        if self._template is None:
            t = _lib.lib.attn_llama_chat_template(self._h)
            if t is not None:
                self._template = ChatTemplate(t.decode("utf-8"))
            elif os.path.isdir(self.path):
                self._template = ChatTemplate.from_tokenizer_config(
                    os.path.join(self.path, "tokenizer_config.json"))
            else:
                fail(ATTN_E_INVALID, "the model has no chat template")
        return self._template

    def apply_chat_template(self, messages, add_generation_prompt=False,
                            tokenize=False):
        """The text of messages in the chat template (the ids when
        tokenize: special tokens parsed, nothing added), as transformers'
        apply_chat_template gives them."""
        text = self.chat_template.render(messages, add_generation_prompt)
        if not tokenize:
            return text
        return self._tok().encode(text, add_special_tokens=False)

    def chat(self, messages, max_new_tokens=256, do_sample=False,
             temperature=1.0, top_k=None, top_p=None, seed=0, max_len=4096,
             callback=None):
        """The assistant's reply (text) to messages, a list of {"role",
        "content"} dicts, in the model's chat template; generation stops at
        the end-of-turn token (<|im_end|>) or after max_new_tokens.

        The model keeps one chat session: when messages continue the
        messages of the previous call followed by the reply it returned,
        only the new messages run through the model (the reply's own ids
        stay in the KV cache, rather than its text tokenized again);
        otherwise the conversation starts over. callback(text) sees the
        reply's text as it is produced."""
        tmpl = self.chat_template
        tok = self._tok()
        msgs = [dict(role=m["role"], content=m["content"])
                if isinstance(m, dict) and "role" in m and "content" in m
                else m for m in messages]
        end = tok.token_to_id("<|im_end|>")
        if end is None:
            end = self.config["eos_token_id"]
        if self._chat is None:
            cap = min(int(max_len), int(self.config["max_position"]))
            self._chat = (Session(self, cap), [], False)
        sess, done, ended = self._chat
        if done and len(msgs) > len(done) and msgs[:len(done)] == done:
            text = ("\n" if ended else "<|im_end|>\n") + tmpl.render(
                msgs[len(done):], True, _continue=True)
        else:  # another conversation
            if len(sess):
                sess.reset()
            self._chat = (sess, [], False)
            text = tmpl.render(msgs, True)
        ids = tok.encode(text, add_special_tokens=False)
        room = sess.capacity - len(sess)
        if len(ids) + 1 > room:
            fail(ATTN_E_SHAPE, "the conversation (%d tokens) and this turn "
                 "(%d) exceed the session's max_len = %d", len(sess),
                 len(ids), sess.capacity)
        sess.feed(ids)
        dec = tok.stream(skip_special_tokens=True)
        parts = []

        def on_id(i):
            piece = dec.step(i)
            parts.append(piece)
            if callback and piece:
                callback(piece)
            return False

        new = sess.generate(min(int(max_new_tokens), room - len(ids)),
                            do_sample=do_sample, temperature=temperature,
                            top_k=top_k, top_p=top_p, seed=seed,
                            eos_token_id=end, callback=on_id)
        rest = dec.end()
        parts.append(rest)
        if callback and rest:
            callback(rest)
        reply = "".join(parts)
        self._chat = (sess, msgs + [{"role": "assistant", "content": reply}],
                      bool(new) and new[-1] == end)
        return reply


class Session(_lib.Owned):
    """One conversation with a LlamaModel whose tokens stay in the KV cache
    across calls: feed(ids) appends tokens (and returns the next-token
    logits), generate(...) continues from everything so far (its tokens
    join the conversation). The ids and logits are those of running the
    whole conversation at once; the logits agree to rounding (a feed of
    several tokens goes through in one pass, products over all of them)."""

    _free = "attn_llama_session_free"

    def __init__(self, model, max_len=None):
        if max_len is None:
            max_len = min(4096, int(model.config["max_position"]))
        self._model = model
        h = _vp()
        _lib.call("attn_llama_session_create", model._h, int(max_len),
                  int(model.threads), byref(h))
        self._h = h


    def _handle(self):
        if not getattr(self, "_h", None) or not self._model._h:
            fail(ATTN_E_INVALID, "the session or its model was closed")
        return self._h

    def __len__(self):
        return int(_lib.lib.attn_llama_session_length(self._handle()))

    @property
    def capacity(self):
        return int(_lib.lib.attn_llama_session_capacity(self._handle()))

    def reset(self):
        """Forgets the conversation."""
        _lib.call("attn_llama_session_reset", self._handle())

    def feed(self, ids):
        """Appends ids (a list, or a text: encoded) to the conversation;
        returns the next-token logits after them, (vocab,) float32."""
        a = _ids(self._model._as_ids(ids), self._model.vocab_size)
        if a.ndim != 1:
            fail(ATTN_E_SHAPE, "feed takes one sequence of ids")
        z = np.empty(self._model.vocab_size, np.float32)
        _lib.call("attn_llama_session_feed", self._handle(),
                  a.ctypes.data_as(_i32p), a.size, z.ctypes.data_as(_fp))
        return z

    def generate(self, max_new_tokens=20, do_sample=False, temperature=1.0,
                 top_k=None, top_p=None, seed=0, eos_token_id=None,
                 callback=None):
        """The new ids (list of int) continuing the conversation, as
        LlamaModel.generate chooses them; they join the conversation."""
        o = _gen_opts(max_new_tokens, do_sample, temperature, top_k, top_p,
                      seed, eos_token_id, self._model.threads)
        cap = max(int(max_new_tokens), 1)
        out = np.zeros(cap, np.int32)
        n = ctypes.c_int64(0)
        _lib.call("attn_llama_session_generate", self._handle(), byref(o),
                  out.ctypes.data_as(_i32p), cap, byref(n),
                  _token_fn(callback), None)
        return [int(x) for x in out[:n.value]]

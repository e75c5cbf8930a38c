"""Chat templates (the C side is include/attn_chat.h): attn recognizes the
ChatML template, with or without a default system prompt, by its structure
and renders it itself; no template engine runs, and other templates are
refused naming them::

    t = attn.ChatTemplate(template_text)     # e.g. a model's chat_template
    t.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    # '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'

render gives what transformers' apply_chat_template(messages,
tokenize=False, add_generation_prompt=...) gives for the same template.
"""

import ctypes
from ctypes import byref

from . import _lib
from ._lib import ATTN_E_INVALID, fail

_vp = ctypes.c_void_p
_sz = ctypes.c_size_t

GENERATION_PROMPT = 1
CONTINUE = 2


class _Message(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


_PROTOS = {
    "attn_chat_template_parse": (ctypes.c_int, [ctypes.c_char_p, _sz,
                                                ctypes.POINTER(_vp)]),
    "attn_chat_template_load": (ctypes.c_int, [ctypes.c_char_p,
                                               ctypes.POINTER(_vp)]),
    "attn_chat_template_free": (None, [_vp]),
    "attn_chat_template_default_system": (ctypes.c_char_p, [_vp]),
    "attn_chat_render": (ctypes.c_int, [_vp, ctypes.POINTER(_Message),
                                        ctypes.c_int64, ctypes.c_int,
                                        ctypes.c_char_p, _sz,
                                        ctypes.POINTER(_sz)]),
}
for _name, (_res, _args) in _PROTOS.items():
    _lib.lib.declare(_name, _res, _args)


def messages_of(messages):
    """A list of {"role", "content"} dicts as C messages (kept alive by the
    returned array)."""
    if isinstance(messages, (str, bytes, dict)) or not hasattr(
            messages, "__iter__"):
        fail(ATTN_E_INVALID, "messages must be a list of {'role', 'content'} "
             "dicts, not %s", type(messages).__name__)
    msgs = list(messages)
    arr = (_Message * max(len(msgs), 1))()
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            fail(ATTN_E_INVALID, "messages[%d] must be a dict with 'role' and "
                 "'content', not %s", i, ascii(m)[:80])
        arr[i].role = _lib.utf8(m["role"], "messages[%d]['role']" % i)
        arr[i].content = _lib.utf8(m["content"], "messages[%d]['content']" % i)
    return arr, len(msgs)


class ChatTemplate(_lib.Owned):
    """A recognized chat template (see the module's docstring)."""

    _free = "attn_chat_template_free"

    def __init__(self, text=None, _handle=None):
        if _handle is not None:
            self._h = _handle
            return
        b = _lib.utf8(text, "the chat template")
        h = _vp()
        _lib.call("attn_chat_template_parse", b, len(b), byref(h))
        self._h = h

    @classmethod
    def from_tokenizer_config(cls, path):
        """The chat_template of a transformers tokenizer_config.json."""
        h = _vp()
        _lib.call("attn_chat_template_load", _lib.fspath(path), byref(h))
        return cls(_handle=h)


    @property
    def default_system(self):
        """The system prompt put first when the messages have none, or
        None."""
        s = _lib.lib.attn_chat_template_default_system(self._h)
        return None if s is None else s.decode("utf-8")

    def render(self, messages, add_generation_prompt=False, _continue=False):
        """The text of messages (at least one) in the template."""
        arr, n = messages_of(messages)
        flags = (GENERATION_PROMPT if add_generation_prompt else 0) | (
            CONTINUE if _continue else 0)
        size = _sz()
        _lib.call("attn_chat_render", self._h, arr, n, flags, None, 0,
                  byref(size))
        buf = ctypes.create_string_buffer(size.value + 1)
        _lib.call("attn_chat_render", self._h, arr, n, flags, buf,
                  size.value + 1, byref(size))
        return buf.raw[:size.value].decode("utf-8")

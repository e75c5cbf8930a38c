"""Loading libattn.so, the ctypes mirrors of the public structs, errors, and
NumPy arrays as attn_tensor views.

Nothing here knows about attention itself: sdpa.py (and the layer and
picture modules) build on these pieces.
"""

import ctypes
import ctypes.util
import functools
import os
import struct

import numpy as np

# --------------------------------------------------------------------------
# Status classes (include/attn.h: attn_status). Values are never renumbered.

ATTN_OK = 0
ATTN_E_INVALID = 1
ATTN_E_SHAPE = 2
ATTN_E_DTYPE = 3
ATTN_E_UNSUPPORTED = 4
ATTN_E_NOMEM = 5
ATTN_E_IO = 6
ATTN_E_FORMAT = 7
ATTN_E_NONFINITE = 8

STATUS_NAMES = {
    ATTN_OK: "ATTN_OK",
    ATTN_E_INVALID: "ATTN_E_INVALID",
    ATTN_E_SHAPE: "ATTN_E_SHAPE",
    ATTN_E_DTYPE: "ATTN_E_DTYPE",
    ATTN_E_UNSUPPORTED: "ATTN_E_UNSUPPORTED",
    ATTN_E_NOMEM: "ATTN_E_NOMEM",
    ATTN_E_IO: "ATTN_E_IO",
    ATTN_E_FORMAT: "ATTN_E_FORMAT",
    ATTN_E_NONFINITE: "ATTN_E_NONFINITE",
}

# The same short names as attn_strerror, so a message reads the same whether
# the check that failed was in Python or in C.
_STATUS_TEXT = {
    ATTN_OK: "ok",
    ATTN_E_INVALID: "invalid argument",
    ATTN_E_SHAPE: "shape mismatch",
    ATTN_E_DTYPE: "unsupported dtype",
    ATTN_E_UNSUPPORTED: "unsupported",
    ATTN_E_NOMEM: "out of memory",
    ATTN_E_IO: "I/O error",
    ATTN_E_FORMAT: "malformed file",
    ATTN_E_NONFINITE: "non-finite input",
}


class AttnError(ValueError):
    """A failure reported by libattn or caught by the binding before the call.

    ``status`` is the attn_status value (``attn.ATTN_E_SHAPE``, ...),
    ``status_name`` its C name, and the message is the library's detail
    message (``attn_last_error()``) after the status class.
    """

    def __init__(self, status, detail):
        self.status = int(status)
        self.status_name = STATUS_NAMES.get(self.status, "ATTN_E_%d" % self.status)
        self.detail = detail
        text = _STATUS_TEXT.get(self.status, "status %d" % self.status)
        super().__init__("%s: %s" % (text, detail) if detail else text)


# --------------------------------------------------------------------------
# Integers crossing into C. ctypes stores a Python int in a C integer field
# or argument modulo 2**bits, silently: 2**64 + 1 became 1 and C read past
# a 1-byte layout. Every struct field (Struct) and every argument of call()
# is range-checked here; the entry points check tighter bounds themselves.

_INT_RANGES = {}
for _t, _bits, _signed in ((ctypes.c_int8, 8, True), (ctypes.c_uint8, 8, False),
                           (ctypes.c_int16, 16, True), (ctypes.c_uint16, 16, False),
                           (ctypes.c_int32, 32, True), (ctypes.c_uint32, 32, False),
                           (ctypes.c_int64, 64, True), (ctypes.c_uint64, 64, False),
                           (ctypes.c_longlong, 64, True), (ctypes.c_ulonglong, 64, False),
                           (ctypes.c_size_t, 8 * ctypes.sizeof(ctypes.c_size_t), False)):
    _INT_RANGES[_t] = ((-(1 << (_bits - 1)), (1 << (_bits - 1)) - 1) if _signed
                       else (0, (1 << _bits) - 1))


def _range_text(lo, hi):
    return "[%d, %d]" % (lo, hi)


def check_int(value, lo, hi, what):
    """Raises AttnError unless the integer value lies in [lo, hi]."""
    if isinstance(value, (int, np.integer)) and not lo <= int(value) <= hi:
        raise AttnError(ATTN_E_INVALID, "%s is %d; it must be in %s" % (
            what, int(value), _range_text(lo, hi)))


_FIELD_RANGES = {}  # Struct subclass -> {field: (lo, hi)}


class Struct(ctypes.Structure):
    """ctypes.Structure whose integer fields refuse values they cannot hold
    (instead of wrapping them)."""

    def __setattr__(self, name, value):
        cls = type(self)
        ranges = _FIELD_RANGES.get(cls)
        if ranges is None:
            ranges = {f[0]: _INT_RANGES[f[1]] for f in cls._fields_
                      if f[1] in _INT_RANGES}
            _FIELD_RANGES[cls] = ranges
        r = ranges.get(name)
        if r is not None:
            check_int(value, r[0], r[1], "%s.%s" % (
                getattr(cls, "_c_name_", cls.__name__), name))
        super().__setattr__(name, value)


def fspath(path, name="path"):
    """path (str, bytes or os.PathLike) as bytes for C. A NUL byte would cut
    the name short in C, so it is refused, as open() does."""
    try:
        b = os.fsencode(path)
    except TypeError:
        raise AttnError(ATTN_E_INVALID, "%s is %r; a file name is needed"
                        % (name, path)) from None
    if b"\0" in b:
        raise AttnError(ATTN_E_INVALID, "%s %r contains a NUL byte (embedded "
                        "null byte)" % (name, path))
    return b


def utf8(text, name):
    """text (a str) as UTF-8 bytes for C, which reads it up to a NUL: a NUL
    inside would cut it short silently, and a lone surrogate has no UTF-8
    form, so both are refused with the position."""
    if not isinstance(text, str):
        raise AttnError(ATTN_E_INVALID, "%s must be a str, not %s"
                        % (name, type(text).__name__))
    at = text.find("\0")
    if at >= 0:
        raise AttnError(ATTN_E_INVALID, "%s holds a NUL character at index %d "
                        "(%s); C reads text up to a NUL, so it is refused "
                        "rather than cut short" % (name, at, ascii(text[:40])))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise AttnError(ATTN_E_INVALID, "%s cannot be written as UTF-8: %s at "
                        "index %d is a lone surrogate (%s)"
                        % (name, ascii(text[e.start]), e.start,
                           ascii(text[:40]))) from None


def nomem(fn):
    """Wraps a public function so that NumPy's MemoryError (an output or a
    copy too large to allocate) surfaces as AttnError(ATTN_E_NOMEM), as
    the library's own allocation failures do."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except MemoryError as e:
            raise AttnError(ATTN_E_NOMEM, "%s: %s" % (
                fn.__qualname__, e or "cannot allocate memory")) from None
    return wrapper


def nomem_class(cls):
    """nomem on every public method (and __init__) of cls."""
    for name, fn in list(vars(cls).items()):
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(fn, (classmethod, staticmethod)):
            setattr(cls, name, type(fn)(nomem(fn.__func__)))
        elif callable(fn):
            setattr(cls, name, nomem(fn))
    return cls


# --------------------------------------------------------------------------
# Element types (attn_dtype)

ATTN_F32, ATTN_F16, ATTN_BF16, ATTN_F64, ATTN_U8, ATTN_I32, ATTN_I64, ATTN_Q8 = range(8)

# NumPy storage dtype of each attn dtype (bf16 is stored as uint16 bits).
NP_STORAGE = {
    ATTN_F32: np.dtype(np.float32),
    ATTN_F16: np.dtype(np.float16),
    ATTN_BF16: np.dtype(np.uint16),
    ATTN_F64: np.dtype(np.float64),
    ATTN_U8: np.dtype(np.uint8),
    ATTN_I32: np.dtype(np.int32),
    ATTN_I64: np.dtype(np.int64),
}

# --------------------------------------------------------------------------
# ctypes mirrors of the public structs, field for field (include/attn.h).
# Enums are int-sized; the layout is checked against attn_sizeof at load.


class Tensor(Struct):
    _c_name_ = "attn_tensor"
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("shape", ctypes.c_int64 * 4),
        ("stride", ctypes.c_int64 * 4),
    ]


class Mask(Struct):
    _c_name_ = "attn_mask"
    _fields_ = [
        ("causal", ctypes.c_int),
        ("align", ctypes.c_int),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("key_lengths", ctypes.POINTER(ctypes.c_int64)),
        ("query_lengths", ctypes.POINTER(ctypes.c_int64)),
        ("keep", ctypes.POINTER(Tensor)),
        ("bias", ctypes.POINTER(Tensor)),
        ("block_size", ctypes.c_int64),
        ("layout", ctypes.POINTER(ctypes.c_uint8)),
        ("layout_heads", ctypes.c_int64),
        ("random_block", ctypes.c_int64),
        ("random_keep_p", ctypes.c_double),
        ("random_seed", ctypes.c_uint64),
        ("softcap", ctypes.c_double),
        ("alibi", ctypes.c_int),
        ("alibi_slopes", ctypes.POINTER(ctypes.c_double)),
        ("n_alibi_slopes", ctypes.c_int64),
        ("sinks", ctypes.POINTER(ctypes.c_double)),
        ("n_sinks", ctypes.c_int64),
        ("sinks_grad", ctypes.POINTER(ctypes.c_double)),
        ("doc_q", ctypes.POINTER(ctypes.c_int64)),
        ("n_doc_q", ctypes.c_int64),
        ("doc_k", ctypes.POINTER(ctypes.c_int64)),
        ("n_doc_k", ctypes.c_int64),
        # user functions (C function pointers): the binding evaluates
        # Python callables in NumPy instead and leaves these NULL
        ("score_mod", ctypes.c_void_p),
        ("score_ctx", ctypes.c_void_p),
        ("mask_mod", ctypes.c_void_p),
        ("mask_ctx", ctypes.c_void_p),
        ("block_mask", ctypes.c_void_p),
    ]


class SdpaOpts(Struct):
    _c_name_ = "attn_sdpa_opts"
    _fields_ = [
        ("scale", ctypes.c_double),
        ("mask", Mask),
        ("dropout_p", ctypes.c_double),
        ("seed", ctypes.c_uint64),
        ("impl", ctypes.c_int),
        ("threads", ctypes.c_int),
        ("rope", ctypes.c_void_p),
        ("rope_q_positions", ctypes.c_void_p),
        ("n_rope_q_positions", ctypes.c_int64),
        ("rope_k_positions", ctypes.c_void_p),
        ("n_rope_k_positions", ctypes.c_int64),
    ]


class Rope(Struct):
    _c_name_ = "attn_rope"
    _fields_ = [
        ("style", ctypes.c_int),
        ("rotary_dim", ctypes.c_int64),
        ("theta", ctypes.c_double),
        ("scaling", ctypes.c_int),
        ("factor", ctypes.c_double),
        ("low_freq_factor", ctypes.c_double),
        ("high_freq_factor", ctypes.c_double),
        ("original_max_position", ctypes.c_double),
    ]


MIRRORED = {"attn_tensor": Tensor, "attn_mask": Mask, "attn_sdpa_opts": SdpaOpts,
            "attn_rope": Rope}

# --------------------------------------------------------------------------
# Finding and loading the library


def library_path():
    """The path of the libattn.so this package loads: $ATTN_LIBRARY if set,
    else the copy installed inside the package, else a source checkout's
    build/libattn.so (PYTHONPATH=python after `make build`), else the
    system's libattn."""
    env = os.environ.get("ATTN_LIBRARY")
    if env:
        if not os.path.exists(env):
            raise ImportError("ATTN_LIBRARY=%s: no such file" % env)
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, "libattn.so"),
                 os.path.join(here, os.pardir, os.pardir, "build", "libattn.so")):
        if os.path.exists(path):
            return os.path.normpath(path)
    found = ctypes.util.find_library("attn")
    if found:
        return found
    raise ImportError(
        "libattn.so not found: install the package with `pip install ./python` "
        "or point ATTN_LIBRARY at a built libattn.so")


_PROTOTYPES = {
    # name: (restype, argtypes)
    "attn_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "attn_last_error": (ctypes.c_char_p, []),
    "attn_clear_error": (None, []),
    "attn_version": (ctypes.c_char_p, []),
    "attn_convert": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                    ctypes.c_int, ctypes.c_size_t]),
    "attn_sizeof": (ctypes.c_size_t, [ctypes.c_char_p]),
    "attn_tensor_4d": (Tensor, [ctypes.c_void_p, ctypes.c_int] + [ctypes.c_int64] * 4),
    "attn_tensor_bthd": (Tensor, [ctypes.c_void_p, ctypes.c_int] + [ctypes.c_int64] * 4),
    "attn_mask_init": (None, [ctypes.POINTER(Mask)]),
    "attn_sdpa_opts_init": (None, [ctypes.POINTER(SdpaOpts)]),
    "attn_sdpa_forward": (ctypes.c_int, [
        ctypes.POINTER(Tensor), ctypes.POINTER(Tensor), ctypes.POINTER(Tensor),
        ctypes.POINTER(SdpaOpts), ctypes.POINTER(Tensor), ctypes.POINTER(Tensor),
        ctypes.c_void_p]),
    "attn_sdpa_backward": (ctypes.c_int, [
        ctypes.POINTER(Tensor), ctypes.POINTER(Tensor), ctypes.POINTER(Tensor),
        ctypes.POINTER(Tensor), ctypes.c_void_p, ctypes.POINTER(Tensor),
        ctypes.POINTER(SdpaOpts), ctypes.POINTER(Tensor), ctypes.POINTER(Tensor),
        ctypes.POINTER(Tensor), ctypes.POINTER(Tensor)]),
    "attn_doc_ids_from_cu_seqlens": (ctypes.c_int, [
        ctypes.POINTER(ctypes.c_int64), ctypes.c_int64, ctypes.c_int64,
        ctypes.POINTER(ctypes.c_int64)]),
    "attn_dropout_kept": (ctypes.c_int, [
        ctypes.c_uint64, ctypes.c_double] + [ctypes.c_int64] * 4),
}

# Symbols an older or partial build may lack: calling them then raises
# AttnError(ATTN_E_UNSUPPORTED) instead of failing at import.
_OPTIONAL = {"attn_sdpa_backward"}


class _Lib:
    """The loaded library with prototypes set; missing optional symbols are
    None."""

    def __init__(self, path):
        self.path = path
        self.dll = ctypes.CDLL(path)
        for name, (restype, argtypes) in _PROTOTYPES.items():
            self.declare(name, restype, argtypes, optional=name in _OPTIONAL)

    def declare(self, name, restype, argtypes, optional=True):
        """Sets the prototype of name; with optional, a missing symbol
        becomes None instead of an ImportError."""
        try:
            fn = getattr(self.dll, name)
        except AttributeError:
            if optional:
                setattr(self, name, None)
                return None
            raise ImportError("%s lacks %s: it is older than this binding"
                              % (self.path, name))
        fn.restype = restype
        fn.argtypes = argtypes
        setattr(self, name, fn)
        return fn

    def check_layout(self):
        for cname, cls in MIRRORED.items():
            want = self.attn_sizeof(cname.encode())
            have = ctypes.sizeof(cls)
            # 0: a library without that part (its functions are None too)
            if want and want != have:
                raise ImportError(
                    "%s: sizeof(%s) is %d bytes in C but %d in the binding; "
                    "the binding does not match this library" % (
                        self.path, cname, want, have))


lib = _Lib(library_path())
lib.check_layout()

# Tests set this to a callable(name, tensors) to see the views passed to C
# (name of the C function, dict of argument name -> Tensor) before the call.
call_hook = None


def float_code(dt):
    """The attn dtype of a NumPy float dtype (float16, 32 or 64), or None;
    bfloat16 travels as uint16 bits with dtype='bfloat16' (bf16_bits)."""
    if dt.kind == "f" and dt.itemsize in (2, 4, 8):
        return {2: ATTN_F16, 4: ATTN_F32, 8: ATTN_F64}[dt.itemsize]
    return None


def bf16_bits(dt, name):
    """Refuses an array named name of dtype dt given with dtype='bfloat16'
    unless it holds the bits, as uint16."""
    if dt != np.uint16:
        fail(ATTN_E_DTYPE, "dtype='bfloat16' expects uint16 arrays holding "
             "bfloat16 bits, but %s is %s", name, dt)


def as_float(x):
    """float(x), or NaN where x is no number (the caller's range check
    then refuses it with its own message)."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def dropout_p(p, name):
    """p as a dropout probability in [0, 1); the message names it name."""
    f = as_float(p)
    if not 0.0 <= f < 1.0:
        fail(ATTN_E_INVALID, "%s is %r; it must be in [0, 1)", name, p)
    return f


def check_cpu_f32(device, dtype, holders):
    """PyTorch's device= and dtype= of a module: the CPU and float32 only
    (holders: "layers", "modules", for the message)."""
    if device not in (None, "cpu"):
        fail(ATTN_E_UNSUPPORTED, "device is %r; attn runs on the CPU (None or "
             "'cpu')", device)
    if dtype not in (None, np.float32, "float32"):
        fail(ATTN_E_DTYPE, "dtype is %r; attn's %s hold float32 parameters "
             "(None or 'float32')", dtype, holders)


def fail(status, fmt, *args):
    """Raises AttnError from a check done in Python, before any C call."""
    raise AttnError(status, fmt % args if args else fmt)


def check(status, fn_name):
    """Turns a nonzero attn_status into AttnError with attn_last_error()."""
    if status != ATTN_OK:
        detail = (lib.attn_last_error() or b"").decode("utf-8", "replace")
        raise AttnError(status, detail or "%s failed" % fn_name)


def call(name, *args, tensors=None):
    """Calls the C function name (GIL released by ctypes) and raises on a
    nonzero status."""
    fn = getattr(lib, name)
    if fn is None:
        raise AttnError(ATTN_E_UNSUPPORTED,
                        "%s is not in this build of libattn (%s)" % (name, lib.path))
    for i, (a, t) in enumerate(zip(args, fn.argtypes or ())):
        r = _INT_RANGES.get(t)
        if r is not None:
            check_int(a, r[0], r[1], "argument %d of %s" % (i + 1, name))
    if call_hook is not None:
        call_hook(name, tensors or {})
    check(fn(*args), name)


def version():
    """The C library's version, "MAJOR.MINOR.PATCH"."""
    return lib.attn_version().decode()


# --------------------------------------------------------------------------
# NumPy arrays as views


def element_strides(arr):
    """Element strides of arr usable by C, or None when the array must be
    copied first (negative, misaligned or fractional strides). Axes of size
    1 get stride 0: they are never stepped over."""
    if not arr.flags.aligned:
        return None
    item = arr.itemsize
    out = [0 if n == 1 else s // item for n, s in zip(arr.shape, arr.strides)]
    for n, s, e in zip(arr.shape, arr.strides, out):
        if n != 1 and (s < 0 or e * item != s):
            return None
    return out


# attn_tensor packed in one step (setting ctypes fields one by one costs
# more than the C call on small inputs); same layout as Tensor.
_TENSOR_PACK = struct.Struct("@Pi4q4q")
assert _TENSOR_PACK.size == ctypes.sizeof(Tensor)
_from_bytes = Tensor.from_buffer_copy


def tensor(arr, attn_dtype, axes_to_4d=None, strides=None):
    """An attn_tensor view of arr (which must stay alive while the view is
    used). axes_to_4d maps each of the 4 C axes to an axis of arr or None
    (an inserted axis of size 1); by default arr has rank 4."""
    if strides is None:
        strides = element_strides(arr)
        if strides is None:  # callers copy such layouts first (c_array)
            raise AttnError(ATTN_E_INVALID, "an array of shape %s is misaligned "
                            "or has strides C cannot follow" % (arr.shape,))
    if axes_to_4d is None:
        shape, stride = arr.shape, strides
    else:
        shape = [1 if a is None else arr.shape[a] for a in axes_to_4d]
        stride = [0 if a is None else strides[a] for a in axes_to_4d]
    return _from_bytes(_TENSOR_PACK.pack(arr.ctypes.data, attn_dtype, *shape,
                                         *stride))


def c_array(a, dtype=None):
    """a as a C-contiguous, aligned array (a copy only when needed):
    np.ascontiguousarray keeps a misaligned contiguous array as it is."""
    return np.require(a, dtype=dtype, requirements=("C", "A"))


def out_tensor(shape4, np_dtype, attn_dtype, zero=False):
    """A fresh C-contiguous output array of shape4 and its view."""
    arr = (np.zeros if zero else np.empty)(shape4, dtype=np_dtype)
    return arr, tensor(arr, attn_dtype)


def shape_str(shape):
    return "(" + ", ".join(str(int(n)) for n in shape) + ")"


def native(arr):
    return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))


def passable(arr, is_mask=False):
    """arr itself if C can read it through its strides, else a C-contiguous
    copy; returns (array, element strides). Masks may broadcast (stride 0)
    and need no contiguous last axis; q, k, v and gradients may not."""
    st = element_strides(arr)
    if st is not None:
        if is_mask:
            return arr, st
        bcast = 0 in st and any(s == 0 and n > 1 for n, s in zip(arr.shape, st))
        if not bcast and not (arr.shape[-1] > 1 and st[-1] != 1):
            return arr, st
    arr = c_array(arr)
    return arr, element_strides(arr)


class Owned:
    """A Python object owning one library handle, self._h, freed by the
    library function named by the class attribute _free when close() is
    called or the object is collected (a handle borrowed from its owner,
    _borrowed true, is only forgotten). Later calls raise through the
    subclass's _handle()."""

    _free = None

    def close(self):
        """Frees the handle (later calls raise)."""
        if getattr(self, "_h", None):
            if not getattr(self, "_borrowed", False):
                getattr(lib, self._free)(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass

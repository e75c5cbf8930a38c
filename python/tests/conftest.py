"""Shared fixtures: the package from this checkout (python/), a seeded RNG,
inputs in every dtype with the float64 values the kernel really sees, and a
hook that records the views handed to C."""

import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # python/, for `import attn`
sys.path.insert(0, HERE)                   # npref

import attn  # noqa: E402
from attn import _lib  # noqa: E402
import npref  # noqa: E402

SANITIZED = os.environ.get("ATTN_SANITIZED") == "1"


@pytest.fixture
def rng(request):
    # one stream per test, stable across runs
    seed = sum(map(ord, request.node.name))
    return np.random.default_rng(seed)


def make(rng, shape, dtype="float32", scale=1.0):
    """(array to pass, float64 values it holds, dtype argument)."""
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    if dtype == "bfloat16":
        bits = npref.f32_to_bf16(x)
        return bits, npref.bf16_to_f32(bits).astype(np.float64), "bfloat16"
    arr = x.astype(dtype)
    return arr, arr.astype(np.float64), None


def refused(fn, *words, status=attn.ATTN_E_INVALID):
    """fn() raises AttnError of that status whose message has every word."""
    with pytest.raises(attn.AttnError) as e:
        fn()
    assert e.value.status == status, str(e.value)
    for w in words:
        assert w in str(e.value), "%r not in %r" % (w, str(e.value))
    return e.value


class Calls:
    """Records (C function name, {arg: Tensor}) of each call to C."""

    def __init__(self):
        self.log = []

    def __call__(self, name, tensors):
        self.log.append((name, {k: (t.data, tuple(t.shape), tuple(t.stride))
                                for k, t in tensors.items()}))


@pytest.fixture
def calls():
    c = Calls()
    _lib.call_hook = c
    yield c
    _lib.call_hook = None


def out_values(x):
    """float64 values of a result: bfloat16 bits (uint16) decoded."""
    x = np.asarray(x)
    if x.dtype == np.uint16:
        return npref.bf16_to_f32(x).astype(np.float64)
    return x.astype(np.float64)


def rounding(x, want):
    """The error of rounding float64 values `want` to the result's dtype
    (results come back in the inputs' dtype, as in PyTorch)."""
    x = np.asarray(x)
    eps = {np.dtype(np.float16): 2.0 ** -11, np.dtype(np.uint16): 2.0 ** -8}.get(x.dtype, 0.0)
    w = np.asarray(want, dtype=np.float64)
    fin = w[np.isfinite(w)]
    return eps * (float(np.max(np.abs(fin))) if fin.size else 0.0) + (6e-8 if eps else 0.0)


def tol_for(*arrays):
    """Tolerance of a float32 computation of values of this magnitude."""
    m = max(1.0, max(float(np.max(np.abs(a))) for a in arrays))
    return 2e-5 * m

"""How arrays reach C: strides without copies, copies only where needed, the
struct layout checks and the library lookup."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import attn
import npref
from attn import _lib
from conftest import make, tol_for


def passed(calls, name="q"):
    """(data pointer, shape, strides) of argument name in the last C call."""
    return calls.log[-1][1][name]


def test_batch_first_is_not_copied(rng, calls):
    # (B, L, H, D) buffers, as nn.MultiheadAttention(batch_first=True) keeps
    B, L, S, H, D = 2, 7, 5, 3, 4
    qb, q64, _ = make(rng, (B, L, H, D))
    kb, k64, _ = make(rng, (B, S, H, D))
    vb, v64, _ = make(rng, (B, S, H, D))
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (qb, kb, vb))
    out = attn.scaled_dot_product_attention(q, k, v, is_causal=True)
    for name, arr in (("q", qb), ("k", kb), ("v", vb)):
        data, shape, stride = passed(calls, name)
        assert data == arr.ctypes.data, name + " was copied"
        assert shape == (B, H, arr.shape[1], D)
        assert stride == (arr.shape[1] * H * D, D, H * D, 1)
    want = npref.sdpa(q64.transpose(0, 2, 1, 3), k64.transpose(0, 2, 1, 3),
                      v64.transpose(0, 2, 1, 3), is_causal=True)[0]
    np.testing.assert_allclose(out, want, atol=tol_for(v64), rtol=0)


def test_strided_views_are_not_copied(rng, calls):
    big, big64, _ = make(rng, (2, 3, 20, 10))
    q = big[:, :, ::3, 2:6]        # every third row, a window of features
    k = big[:, :, 1::2, 4:8]
    v = big[::1, :, 1::2, :5]
    out = attn.scaled_dot_product_attention(q, k, v)
    assert passed(calls, "q")[0] == q.ctypes.data
    assert passed(calls, "q")[2] == (600, 200, 30, 1)
    assert passed(calls, "k")[0] == k.ctypes.data
    assert passed(calls, "v")[0] == v.ctypes.data
    want = npref.sdpa(big64[:, :, ::3, 2:6], big64[:, :, 1::2, 4:8],
                      big64[:, :, 1::2, :5])[0]
    np.testing.assert_allclose(out, want, atol=tol_for(big64), rtol=0)


@pytest.mark.parametrize("rank", [2, 3])
def test_low_ranks_are_views(rng, calls, rank):
    shape = (5, 4) if rank == 2 else (3, 5, 4)
    q, _, _ = make(rng, shape)
    attn.scaled_dot_product_attention(q, q, q)
    data, shape4, stride = passed(calls)
    assert data == q.ctypes.data
    assert shape4 == ((1, 1) + shape if rank == 2 else (3, 1, 5, 4))


@pytest.mark.parametrize("how", ["last_axis", "negative", "fortran", "broadcast"])
def test_unusable_layouts_are_copied(rng, calls, how):
    base, base64, _ = make(rng, (2, 6, 8))
    if how == "last_axis":     # features not contiguous
        q = np.swapaxes(make(rng, (2, 8, 6))[0], 1, 2)
    elif how == "negative":
        q = base[:, ::-1]
    elif how == "fortran":
        q = np.asfortranarray(base)
    else:                      # stride 0 on a real axis
        q = np.broadcast_to(base[:1], base.shape)
    out = attn.scaled_dot_product_attention(q, base, base)
    data, _, stride = passed(calls)
    assert data != q.ctypes.data and stride[3] == 1
    want = npref.sdpa(q.astype(np.float64)[:, None], base64[:, None],
                      base64[:, None])[0][:, 0]
    np.testing.assert_allclose(out, want, atol=tol_for(base64), rtol=0)


def test_broadcast_mask_is_not_copied(rng, calls):
    q, _, _ = make(rng, (2, 3, 4, 8))
    pad = rng.random((2, 6)) < 0.7
    pad[:, 0] = True
    m = pad[:, None, None, :]          # (B, 1, 1, Lk) key padding
    k, _, _ = make(rng, (2, 3, 6, 8))
    _, w = attn.scaled_dot_product_attention(q, k, k, attn_mask=m,
                                             return_weights=True)
    assert ((w > 0) == np.broadcast_to(m, w.shape)).all()
    assert passed(calls, "keep") == (m.ctypes.data, (2, 1, 1, 6), (6, 0, 0, 1))
    # a np.broadcast_to view keeps its stride 0 too
    f = np.broadcast_to(rng.standard_normal(6).astype(np.float32), (2, 3, 4, 6))
    attn.scaled_dot_product_attention(q, k, k, attn_mask=f)
    assert passed(calls, "bias") == (f.ctypes.data, (2, 3, 4, 6), (0, 0, 0, 1))
    # a transposed mask is read through its strides
    t = np.ascontiguousarray((rng.random((6, 4)) < 0.8).T)
    t = np.asfortranarray(t)
    attn.scaled_dot_product_attention(q, k, k, attn_mask=t)
    assert passed(calls, "keep") == (t.ctypes.data, (1, 1, 4, 6), (0, 0, 1, 4))


def test_backward_copies_a_broadcast_view_bias(rng, calls):
    # a stride-0 bias would make C sum its gradient over that axis; the
    # view's elements each need their own (checked in test_backward)
    q, _, _ = make(rng, (2, 3, 4, 8))
    f = np.broadcast_to(rng.standard_normal(4).astype(np.float32), (2, 3, 4, 4))
    try:
        attn.sdpa_backward(q, q, q, q, attn_mask=f)
    except attn.AttnError:  # a build without backward still made the call
        pass
    data, shape, stride = calls.log[-1][1]["bias"]
    assert data != f.ctypes.data and stride == (48, 16, 4, 1)


def test_readonly_inputs(rng):
    q, _, _ = make(rng, (4, 8))
    q.setflags(write=False)
    out = attn.scaled_dot_product_attention(q, q, q)
    assert out.shape == (4, 8) and out.flags.writeable


def test_big_endian_inputs(rng):
    q, q64, _ = make(rng, (4, 8))
    qb = q.astype(">f4")
    np.testing.assert_array_equal(attn.scaled_dot_product_attention(qb, qb, qb),
                                  attn.scaled_dot_product_attention(q, q, q))


def test_lists_are_accepted():
    out = attn.scaled_dot_product_attention([[1.0, 0.0]], [[1.0, 0.0]],
                                            [[2.0, 3.0]], dtype="float64",
                                            impl="ref")
    np.testing.assert_array_equal(out, [[2.0, 3.0]])


# ---- struct layout and the library itself -------------------------------

@pytest.mark.parametrize("cname", sorted(_lib.MIRRORED))
def test_struct_sizes_match_c(cname):
    assert _lib.lib.attn_sizeof(cname.encode()) == ctypes.sizeof(_lib.MIRRORED[cname])


def test_struct_fields_match_c():
    # fields written by C land where the mirror reads them
    o = _lib.SdpaOpts()
    ctypes.memset(ctypes.byref(o), 0x5A, ctypes.sizeof(o))
    _lib.lib.attn_sdpa_opts_init(ctypes.byref(o))
    assert o.scale == 0.0 and o.dropout_p == 0.0 and o.seed == 0
    assert o.impl == 0 and o.threads == 0
    m = o.mask
    assert m.causal == 0 and m.align == 0
    assert m.window_left == -1 and m.window_right == -1
    assert not m.key_lengths and not m.keep and not m.bias and not m.layout
    assert m.block_size == 0 and m.random_block == 0 and m.random_seed == 0
    t = _lib.lib.attn_tensor_bthd(None, _lib.ATTN_F16, 2, 5, 3, 4)
    assert t.dtype == _lib.ATTN_F16
    assert tuple(t.shape) == (2, 3, 5, 4) and tuple(t.stride) == (60, 4, 12, 1)
    t = _lib.lib.attn_tensor_4d(None, _lib.ATTN_BF16, 2, 3, 5, 7)
    assert tuple(t.stride) == (105, 35, 7, 1) and t.dtype == _lib.ATTN_BF16


def test_every_status_is_mapped():
    for s in range(9):
        assert s in attn.STATUS_NAMES
        # the Python text is the C one, so messages read the same
        assert _lib._STATUS_TEXT[s] == _lib.lib.attn_strerror(s).decode()
        e = attn.AttnError(s, "detail")
        assert isinstance(e, ValueError) and e.status == s
        assert getattr(attn, attn.STATUS_NAMES[s]) == s
        assert str(e).endswith("detail")


def test_version():
    assert attn.version() == attn.__version__


def run_python(code, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], env=e, text=True,
                          capture_output=True, cwd=os.path.dirname(
                              os.path.dirname(os.path.abspath(__file__))))


def test_attn_library_names_the_library():
    r = run_python("import attn; print(attn.library_path())")
    assert r.returncode == 0, r.stderr
    assert os.path.samefile(r.stdout.strip(), _lib.lib.path)
    r = run_python("import attn", ATTN_LIBRARY="/nonexistent/libattn.so")
    assert r.returncode != 0 and "ATTN_LIBRARY=/nonexistent/libattn.so" in r.stderr


def test_missing_symbol_is_an_attn_error(monkeypatch, rng):
    q, _, _ = make(rng, (3, 4))
    monkeypatch.setattr(_lib.lib, "attn_sdpa_backward", None)
    with pytest.raises(attn.AttnError) as e:
        attn.sdpa_backward(np.ones((3, 4), np.float32), q, q, q)
    assert e.value.status == attn.ATTN_E_UNSUPPORTED
    assert "attn_sdpa_backward" in str(e.value)


def test_python_threads(rng):
    # ctypes releases the GIL during the call; the error message is per
    # thread, so concurrent failures and successes do not mix
    import threading
    q, _, _ = make(rng, (2, 2, 33, 8))
    want = attn.scaled_dot_product_attention(q, q, q, is_causal=True)
    results, errors = [], []
    bad = {}
    for i in (1, 3):
        bad[i] = q.copy()
        bad[i][1, 0, i, 5] = np.nan

    def work(i):
        for _ in range(20):
            if i % 2:
                try:  # found by C: the message comes from attn_last_error
                    attn.scaled_dot_product_attention(bad[i], q, q)
                except attn.AttnError as e:
                    errors.append((i, e.detail))
            else:
                results.append(attn.scaled_dot_product_attention(q, q, q,
                                                                 is_causal=True))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 40 and all(np.array_equal(r, want) for r in results)
    assert len(errors) == 40
    assert all(d == "q[1, 0, %d, 5] is NaN" % i for i, d in errors)

"""Bad input raises AttnError (a ValueError) with a message that names the
argument and the numbers; checks done in Python make no C call."""

import numpy as np
import pytest

import attn
from conftest import make

sdpa = attn.scaled_dot_product_attention
E = attn


@pytest.fixture
def qkv(rng):
    q, _, _ = make(rng, (2, 3, 5, 4))
    k, _, _ = make(rng, (2, 3, 6, 4))
    v, _, _ = make(rng, (2, 3, 6, 2))
    return q, k, v


def raises(status, words, fn, *a, **kw):
    with pytest.raises(attn.AttnError) as e:
        fn(*a, **kw)
    assert isinstance(e.value, ValueError)
    assert e.value.status == status, str(e.value)
    for w in words:
        assert w in str(e.value), "%r not in %r" % (w, str(e.value))
    return e.value


# (name, status, words in the message, function(q, k, v) making the call)
PY_CASES = [
    ("rank 1", E.ATTN_E_SHAPE, ["rank 1", "(4)"],
     lambda q, k, v: sdpa(q[0, 0, 0], k[0, 0, 0], v[0, 0, 0])),
    ("rank 5", E.ATTN_E_SHAPE, ["rank 5"],
     lambda q, k, v: sdpa(q[None], k[None], v[None])),
    ("ranks differ", E.ATTN_E_SHAPE, ["same rank", "4, 3 and 4"],
     lambda q, k, v: sdpa(q, k[0], v)),
    ("features", E.ATTN_E_SHAPE, ["key has 3 features", "query has 4"],
     lambda q, k, v: sdpa(q, k[..., :3], v)),
    ("positions", E.ATTN_E_SHAPE, ["value has 5 positions", "key has 6"],
     lambda q, k, v: sdpa(q, k, v[:, :, :5])),
    ("batch", E.ATTN_E_SHAPE, ["batch sizes differ", "query has 2, key has 1"],
     lambda q, k, v: sdpa(q, k[:1], v[:1])),
    ("heads", E.ATTN_E_SHAPE, ["query has 3 heads but key has 1", "enable_gqa"],
     lambda q, k, v: sdpa(q, k[:, :1], v[:, :1])),
    ("gqa groups", E.ATTN_E_SHAPE, ["3 heads, not a multiple of the 2"],
     lambda q, k, v: sdpa(q, k[:, :2], v[:, :2], enable_gqa=True)),
    ("empty", E.ATTN_E_SHAPE, ["empty axis"],
     lambda q, k, v: sdpa(q[:, :, :0], k, v)),
    ("int32", E.ATTN_E_DTYPE, ["query has dtype int32", "float32"],
     lambda q, k, v: sdpa(q.astype(np.int32), k, v)),
    ("complex", E.ATTN_E_DTYPE, ["complex64"],
     lambda q, k, v: sdpa(q.astype(np.complex64), k, v)),
    ("object", E.ATTN_E_DTYPE, ["object"],
     lambda q, k, v: sdpa(q.astype(object), k, v)),
    ("bool q", E.ATTN_E_DTYPE, ["bool"],
     lambda q, k, v: sdpa(q > 0, k, v)),
    ("uint16 w/o dtype", E.ATTN_E_DTYPE, ["uint16", "dtype='bfloat16'"],
     lambda q, k, v: sdpa(q.view(np.uint16)[..., :4], k.view(np.uint16)[..., :4],
                          v.view(np.uint16)[..., :2])),
    ("bf16 not uint16", E.ATTN_E_DTYPE, ["dtype='bfloat16' expects uint16", "float32"],
     lambda q, k, v: sdpa(q, k, v, dtype="bfloat16")),
    ("dtype mismatch", E.ATTN_E_DTYPE, ["query is float32", "'float16'"],
     lambda q, k, v: sdpa(q, k, v, dtype="float16")),
    ("mixed", E.ATTN_E_DTYPE, ["share a dtype", "float32, float16 and float32"],
     lambda q, k, v: sdpa(q, k.astype(np.float16), v)),
    ("bad dtype arg", E.ATTN_E_INVALID, ["dtype is 'int8'"],
     lambda q, k, v: sdpa(q, k, v, dtype="int8")),
    ("mask shape", E.ATTN_E_SHAPE, ["attn_mask of shape (5, 5)", "(2, 3, 5, 6)"],
     lambda q, k, v: sdpa(q, k, v, attn_mask=np.ones((5, 5), bool))),
    ("mask rank", E.ATTN_E_SHAPE, ["attn_mask of shape (2, 2, 3, 5, 6)"],
     lambda q, k, v: sdpa(q, k, v, attn_mask=np.ones((2, 2, 3, 5, 6), bool))),
    ("mask batch", E.ATTN_E_SHAPE, ["cannot broadcast"],
     lambda q, k, v: sdpa(q, k, v, attn_mask=np.ones((3, 1, 1, 6), bool))),
    ("mask int", E.ATTN_E_DTYPE, ["attn_mask has dtype int64", "bool (True = attend)"],
     lambda q, k, v: sdpa(q, k, v, attn_mask=np.ones((5, 6), np.int64))),
    ("scale 0", E.ATTN_E_INVALID, ["scale is 0", "positive"],
     lambda q, k, v: sdpa(q, k, v, scale=0)),
    ("scale -1", E.ATTN_E_INVALID, ["scale is -1"],
     lambda q, k, v: sdpa(q, k, v, scale=-1.0)),
    ("scale nan", E.ATTN_E_INVALID, ["scale is nan"],
     lambda q, k, v: sdpa(q, k, v, scale=float("nan"))),
    ("scale str", E.ATTN_E_INVALID, ["scale is 'big'"],
     lambda q, k, v: sdpa(q, k, v, scale="big")),
    ("dropout 1", E.ATTN_E_INVALID, ["dropout_p is 1.0", "[0, 1)"],
     lambda q, k, v: sdpa(q, k, v, dropout_p=1.0)),
    ("dropout neg", E.ATTN_E_INVALID, ["dropout_p is -0.1"],
     lambda q, k, v: sdpa(q, k, v, dropout_p=-0.1)),
    ("seed", E.ATTN_E_INVALID, ["seed is -1"],
     lambda q, k, v: sdpa(q, k, v, dropout_p=0.1, seed=-1)),
    ("impl", E.ATTN_E_INVALID, ["impl is 'fast'", "'flash'"],
     lambda q, k, v: sdpa(q, k, v, impl="fast")),
    ("threads", E.ATTN_E_INVALID, ["threads is -2"],
     lambda q, k, v: sdpa(q, k, v, threads=-2)),
    ("align", E.ATTN_E_INVALID, ["causal_alignment is 'bottom'"],
     lambda q, k, v: sdpa(q, k, v, causal_alignment="bottom")),
    ("is_causal", E.ATTN_E_INVALID, ["is_causal is 'yes'"],
     lambda q, k, v: sdpa(q, k, v, is_causal="yes")),
    ("window int", E.ATTN_E_INVALID, ["window is 3", "(left, right)"],
     lambda q, k, v: sdpa(q, k, v, window=3)),
    ("window neg", E.ATTN_E_INVALID, ["window[0] (left) is -1"],
     lambda q, k, v: sdpa(q, k, v, window=(-1, 2))),
    ("key_lengths count", E.ATTN_E_SHAPE, ["key_lengths has shape (3)", "2 entries"],
     lambda q, k, v: sdpa(q, k, v, key_lengths=[1, 2, 3])),
    ("key_lengths range", E.ATTN_E_SHAPE, ["key_lengths[1] = 7 is outside [0, 6]"],
     lambda q, k, v: sdpa(q, k, v, key_lengths=[1, 7])),
    ("key_lengths float", E.ATTN_E_DTYPE, ["key_lengths must hold integers"],
     lambda q, k, v: sdpa(q, k, v, key_lengths=[1.5, 2])),
    ("query_lengths range", E.ATTN_E_SHAPE, ["query_lengths[0] = -1"],
     lambda q, k, v: sdpa(q, k, v, query_lengths=[-1, 2])),
    ("backward grad shape", E.ATTN_E_SHAPE, ["grad_out has shape (2, 3, 5, 3)"],
     lambda q, k, v: attn.sdpa_backward(np.zeros((2, 3, 5, 3), np.float32), q, k, v)),
    ("backward grad dtype", E.ATTN_E_DTYPE, ["grad_out has dtype int64"],
     lambda q, k, v: attn.sdpa_backward(np.zeros((2, 3, 5, 2), np.int64), q, k, v)),
    ("backward seed", E.ATTN_E_INVALID, ["pass the seed the forward used"],
     lambda q, k, v: attn.sdpa_backward(np.zeros((2, 3, 5, 2)), q, k, v,
                                        dropout_p=0.5)),
    ("backward lse", E.ATTN_E_SHAPE, ["lse has shape (2, 3)", "(2, 3, 5)"],
     lambda q, k, v: attn.sdpa_backward(np.zeros((2, 3, 5, 2)), q, k, v,
                                        out=np.zeros((2, 3, 5, 2)),
                                        lse=np.zeros((2, 3)))),
]


@pytest.mark.parametrize("name,status,words,fn", PY_CASES, ids=[c[0] for c in PY_CASES])
def test_checked_before_c(qkv, calls, name, status, words, fn):
    raises(status, words, fn, *qkv)
    assert calls.log == [], "a C call was made before the check"


def test_nan_in_inputs(qkv):
    q, k, v = (x.copy() for x in qkv)
    q[1, 2, 3, 0] = np.nan
    raises(E.ATTN_E_NONFINITE, ["q[1, 2, 3, 0] is NaN"], sdpa, q, k, v)
    v[0, 0, 1, 1] = np.inf
    raises(E.ATTN_E_NONFINITE, ["v[0, 0, 1, 1] is Inf"], sdpa, qkv[0], k, v)


def test_nan_and_plus_inf_in_float_mask(qkv):
    m = np.zeros((5, 6), np.float32)
    m[2, 4] = np.nan
    raises(E.ATTN_E_NONFINITE, ["NaN", "only -inf may be used"], sdpa, *qkv,
           attn_mask=m)
    m[2, 4] = np.inf
    raises(E.ATTN_E_NONFINITE, ["+inf"], sdpa, *qkv, attn_mask=m)


def test_nan_in_grad_out(qkv):
    g = np.zeros((2, 3, 5, 2), np.float32)
    g[0, 1, 2, 1] = np.nan
    raises(E.ATTN_E_NONFINITE, ["dout[0, 1, 2, 1] is NaN"], attn.sdpa_backward,
           g, *qkv)


def test_error_is_cleared_between_calls(qkv):
    q, k, v = qkv
    with pytest.raises(attn.AttnError):
        sdpa(q, k, v, key_lengths=[1, 9])
    assert sdpa(q, k, v).shape == (2, 3, 5, 2)


def test_error_carries_the_c_message(qkv):
    q, k, v = (x.copy() for x in qkv)
    q[0, 0, 0, 0] = np.nan
    e = raises(E.ATTN_E_NONFINITE, [], sdpa, q, k, v)
    assert e.status_name == "ATTN_E_NONFINITE"
    assert e.detail == "q[0, 0, 0, 0] is NaN"
    assert str(e) == "non-finite input: q[0, 0, 0, 0] is NaN"


def test_mixed_float_inputs_refused():
    """One dtype rule for the binding and the CLI, PyTorch's: query, key and
    value share a dtype (float32 with float64 too); results come back in
    it."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 5, 4)).astype(np.float32)
    with pytest.raises(attn.AttnError, match="must share a dtype"):
        attn.scaled_dot_product_attention(q, q.astype(np.float64), q)
    out = attn.scaled_dot_product_attention(q.astype(np.float16), q.astype(np.float16),
                                            q.astype(np.float16))
    assert out.dtype == np.float16

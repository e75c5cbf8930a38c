"""Hostile input to the binding: integers that do not fit the C
fields, misaligned arrays, NUL bytes in paths, allocations NumPy cannot
make. Each raises AttnError (a ValueError) and never reaches C wrapped."""

import numpy as np
import pytest

import attn
from attn import _lib
from conftest import refused

sdpa = attn.scaled_dot_product_attention


def qkv(L=5, D=4, seed=0):
    r = np.random.default_rng(seed)
    return [r.standard_normal((L, D)).astype(np.float32) for _ in range(3)]


# ---- integers wider than their C field ------------------------------------

def test_block_size_beyond_int64_is_refused():
    # 2**64 + 1 once became block_size 1 over a 1-byte layout: C read
    # Lq x Lk bytes from it (ASan heap-buffer-overflow)
    q, k, v = qkv(L=17)
    layout = np.ones((1, 1), np.bool_)
    refused(lambda: sdpa(q, k, v, block_sparse=(2**64 + 1, layout)),
            "block_size", str(2**64 + 1))
    refused(lambda: sdpa(q, k, v, block_sparse=(2**63, layout)), "block_size")
    # the largest valid block covers everything with one layout cell
    out = sdpa(q, k, v, block_sparse=(2**63 - 1, layout))
    np.testing.assert_array_equal(out, sdpa(q, k, v))


def test_window_beyond_the_c_limit_is_refused():
    q, k, v = qkv()
    for w in (2**64 + 1, 2**63, 2**61 + 1):
        refused(lambda: sdpa(q, k, v, window=(w, None)), "window[0]", str(w))
        refused(lambda: sdpa(q, k, v, window=(0, w)), "window[1]", str(w))
    # 2**61 itself is the widest accepted, the same as unbounded here
    np.testing.assert_array_equal(sdpa(q, k, v, window=(2**61, 0)),
                                  sdpa(q, k, v, is_causal=True))


def test_random_blocks_beyond_int64_are_refused():
    q, k, v = qkv()
    refused(lambda: sdpa(q, k, v, random_blocks=(2**64, 0.0, 1)), "random_blocks")
    refused(lambda: sdpa(q, k, v, random_blocks=(1, 0.5, 2**64)), "seed")


def test_struct_fields_refuse_what_they_cannot_hold():
    m = _lib.Mask()
    refused(lambda: setattr(m, "window_left", 2**64 + 1), "attn_mask.window_left")
    refused(lambda: setattr(m, "causal", 2**31), "attn_mask.causal")
    refused(lambda: setattr(m, "random_seed", -1), "attn_mask.random_seed")
    m.window_left = -(2**63)
    m.random_seed = 2**64 - 1
    assert (m.window_left, m.random_seed) == (-(2**63), 2**64 - 1)


def test_layer_config_integers_are_range_checked():
    refused(lambda: attn.MultiHeadAttention(2**64 + 8, 2, seed=0), "d_model")
    refused(lambda: attn.MultiHeadAttention(8, 2**31, seed=0), "num_heads")


def test_call_arguments_are_range_checked():
    refused(lambda: _lib.call("attn_dropout_kept", 0, 0.5, 2**64 + 1, 0, 0, 0),
            "argument 3 of attn_dropout_kept")


# ---- arrays ----------------------------------------------------------------

def misaligned(shape):
    n = int(np.prod(shape))
    raw = np.zeros(4 * n + 4, np.uint8)
    a = raw[1:1 + 4 * n].view(np.float32).reshape(shape)
    assert a.flags.c_contiguous and not a.flags.aligned
    a[...] = np.random.default_rng(1).standard_normal(shape)
    return a


def test_misaligned_contiguous_arrays_are_copied():
    q, k, v = qkv()
    mq, mk, mv = misaligned(q.shape), misaligned(k.shape), misaligned(v.shape)
    mq[...], mk[...], mv[...] = q, k, v
    np.testing.assert_array_equal(sdpa(mq, mk, mv), sdpa(q, k, v))
    kl = np.zeros(17, np.uint8)[1:9].view(np.int64)
    assert not kl.flags.aligned
    kl[...] = [3]
    q3, k3, v3 = (x[None] for x in (q, k, v))
    np.testing.assert_array_equal(sdpa(q3, k3, v3, key_lengths=kl),
                                  sdpa(q3, k3, v3, key_lengths=[3]))
    mha = attn.MultiHeadAttention(4, 2, seed=0)
    x = misaligned((1, 5, 4))
    y = np.array(x)
    assert y.flags.aligned
    np.testing.assert_array_equal(mha.forward(x, x, x)[0], mha.forward(y, y, y)[0])


def test_tensor_view_of_unusable_strides_is_an_attn_error():
    a = misaligned((3, 4))
    refused(lambda: _lib.tensor(a, _lib.ATTN_F32), "misaligned")


# ---- paths -------------------------------------------------------------------

def test_nul_in_a_path_is_refused(tmp_path):
    mha = attn.MultiHeadAttention(4, 2, seed=0)
    bad = str(tmp_path / "model.bin") + "\0.txt"
    e = refused(lambda: mha.save(bad), "NUL")
    assert isinstance(e, ValueError)
    assert not (tmp_path / "model.bin").exists()
    refused(lambda: attn.MultiHeadAttention.load(bad), "NUL")
    w = np.full((1, 2, 2), 0.5, np.float32)
    refused(lambda: attn.heatmap(w, str(tmp_path / "h.png") + "\0"), "NUL")
    assert not (tmp_path / "h.png").exists()


# ---- memory ------------------------------------------------------------------

def test_numpy_memory_error_is_an_attn_error():
    # query (1, 2**20, 1) x key (1, 2**20, 1) weights: 2**40 floats (4 TiB)
    q = np.ones((2**20, 1), np.float32)
    v = np.ones((2**20, 1), np.float32)
    with pytest.raises(attn.AttnError) as e:
        # the key is a broadcast view: 4 MiB of input, a 4 TiB output asked
        sdpa(q[:2**20], q, v, return_weights=True)
    assert e.value.status == attn.ATTN_E_NOMEM
    assert "scaled_dot_product_attention" in str(e.value)


def test_new_floor_configs_are_range_checked():
    # the KV cache, generation and pretrained configs are range-checked
    # structs too: 2**64 + 1 must not wrap to 1 on its way into C
    with pytest.raises(attn.AttnError):
        attn.KVCache(2**64 + 1, 1, 4, 8)
    from attn import cache, pretrained, transformer
    for cls in (cache.KVCacheConfig, pretrained._Config, transformer.DecoderConfig,
                transformer.TransformerConfig, transformer.GenerateOpts,
                transformer.GenTask):
        assert issubclass(cls, _lib.Struct), cls.__name__

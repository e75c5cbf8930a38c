"""Makes tests/data/gguf/: a small GGUF file written by the `gguf`
package (llama.cpp's Python writer) with one tensor of each type attn
reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1), one it does not (Q6_K, raw
bytes), and a metadata entry of each value type; and, for each tensor
attn reads, the package's own NumPy dequantization as NAME.npy (float32),
which test_gguf compares with attn's bit for bit.

usage: python make_gguf_fixture.py OUT_DIR   (a venv with numpy and gguf)
"""
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import quants

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "data", "gguf")
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(7)

w = gguf.GGUFWriter(os.path.join(out, "types.gguf"), "llama")
w.add_uint8("t.u8", 200)
w.add_int8("t.i8", -100)
w.add_uint16("t.u16", 60000)
w.add_int16("t.i16", -30000)
w.add_uint32("t.u32", 4000000000)
w.add_int32("t.i32", -2000000000)
w.add_float32("t.f32", 0.15625)
w.add_bool("t.bool", True)
w.add_string("t.str", "caf\u00e9 \u2603")
w.add_array("t.strs", ["a", "", "\u00e9t\u00e9", "<|im_end|>"])
w.add_array("t.ints", [3, -1, 7])
w.add_uint64("t.u64", 2**63 + 5)
w.add_int64("t.i64", -2**40)
w.add_float64("t.f64", -1.0e300)

tensors = {
    "f32": (rng.standard_normal((3, 5)).astype(np.float32), Q.F32),
    "f16": ((rng.standard_normal((2, 7)) * 100).astype(np.float32), Q.F16),
    "bf16": ((rng.standard_normal((4, 3)) * 1e-3).astype(np.float32), Q.BF16),
    "q8_0": ((rng.standard_normal((3, 64)) * 3).astype(np.float32), Q.Q8_0),
    "q4_0": ((rng.standard_normal((5, 32)) * 0.02).astype(np.float32), Q.Q4_0),
    "q4_1": ((rng.standard_normal((2, 96)) + 4).astype(np.float32), Q.Q4_1),
}
# a block of zeros (scale 0) in each quantized type
for name in ("q8_0", "q4_0", "q4_1"):
    tensors[name][0][0, :32] = 0
for name, (x, qt) in tensors.items():
    if qt == Q.F32:
        data, raw = x, None
    elif qt == Q.F16:
        data, raw = x.astype(np.float16), None
    else:
        data, raw = quants.quantize(x, qt), qt
    if raw is None:
        w.add_tensor(name, data)
        back = data.astype(np.float32)
    else:
        w.add_tensor(name, data, raw_dtype=raw)
        back = quants.dequantize(data, qt).astype(np.float32)
    assert back.shape == x.shape, (name, back.shape)
    np.save(os.path.join(out, name + ".npy"), back)
# a type attn does not read: one Q6_K block of fixed bytes
w.add_tensor("q6_k", np.arange(210, dtype=np.uint8).reshape(1, 210),
             raw_dtype=Q.Q6_K)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print("wrote", out)

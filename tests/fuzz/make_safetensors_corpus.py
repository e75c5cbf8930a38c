#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_safetensors.c (run once; the files are
kept in git): a few valid files and one of each hostile kind that
tests/test_safetensors.c also checks. python3 make_safetensors_corpus.py"""
import json, os, struct

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "safetensors")
os.makedirs(here, exist_ok=True)


def st(header, data, raw=None, pad=0):
    h = (raw if raw is not None else json.dumps(header, separators=(",", ":"))).encode()
    h += b" " * pad
    return struct.pack("<Q", len(h)) + h + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


good = {"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
        "b": {"dtype": "F16", "shape": [3], "data_offsets": [16, 22]},
        "c": {"dtype": "BF16", "shape": [], "data_offsets": [22, 24]},
        "__metadata__": {"format": "pt"}}
gdata = f32(1, 2, 3, 4) + struct.pack("<3e", 0.5, -1, 2) + b"\x80\x3f"
cases = {
    "good_three_dtypes": st(good, gdata, pad=5),
    "good_empty": st({}, b""),
    "good_zero_size": st({"z": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]},
                          "i": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}},
                         struct.pack("<q", 7)),
    "good_unicode_name": st({"\u00e9t\u00e9\U0001F600": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}, b"\x01\x02"),
    "bad_truncated": st(good, gdata)[:-3],
    "bad_header_len": struct.pack("<Q", 1 << 40) + b"{}",
    "bad_out_of_range": st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 800]}}, f32(1, 2)),
    "bad_overlap": st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                       "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, f32(1, 2)),
    "bad_hole": st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, f32(1, 2)),
    "bad_dtype": st({"a": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}}, f32(1)),
    "bad_shape_size": st({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, f32(1, 2)),
    "bad_overflow_shape": st({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}}, f32(1)),
    "bad_json": st(None, f32(1), raw='{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]'),
    "bad_duplicate": st(None, f32(1, 2), raw='{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                            '"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'),
    "bad_nonprint_name": st({"\x01\x7f\u00ff": {"dtype": "X\x02", "shape": [1], "data_offsets": [0, 4]}}, f32(1)),
    "bad_deep": st(None, b"", raw='{"__metadata__":' + "[" * 200 + "]" * 200 + "}"),
}
for name, blob in cases.items():
    with open(os.path.join(here, name), "wb") as f:
        f.write(blob)
print("wrote", len(cases), "files to", here)

#!/usr/bin/env python3
"""Makes tests/data/llama_gguf/: GGUF files of the Llama family written by
the `gguf` package (llama.cpp's Python writer), as llama.cpp's converter
lays a transformers checkpoint out (its tensor names, its llama.* keys,
the rows of each Q and K head interleaved for pair-wise rotation):

  llama_gqa.gguf      tests/data/llama/llama_gqa (transformers' tiny random
                      checkpoint) in F32: attn must give the folder's
                      logits bit for bit
  llama_gqa_q8.gguf   the same with the 2-D weights in Q8_0 (those whose
                      rows are whole blocks of 32; ffn_down stays F32): the kept
                      quantized rows must dequantize to the f32 weights
  tied.gguf           a tiny random model without output.weight (tied)
and files that must be refused, each a small variant of tied.gguf:
  arch_gemma.gguf     general.architecture "gemma"
  missing.gguf        blk.0.ffn_up.weight left out
  shape.gguf          blk.0.attn_k.weight with one row too many
  q6k.gguf            blk.0.ffn_down.weight stored as Q6_K
  rope_yarn.gguf      llama.rope.scaling.type "yarn"

usage: python3 tests/make_llama_gguf_fixtures.py   (numpy, gguf, safetensors)
"""
import json
import os

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import quants
from safetensors.numpy import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data", "llama_gguf")


def permute(w, heads):
    """llama.cpp's converter: per head, row 2i + j <- row j * (d/2) + i."""
    d = w.shape[0] // heads
    return (w.reshape(heads, 2, d // 2, *w.shape[1:]).swapaxes(1, 2)
            .reshape(w.shape))


def write(path, cfg, tensors, arch="llama", quant=None, rope_type=None,
          skip=(), override=None):
    w = gguf.GGUFWriter(path, arch)
    a = "llama"
    w.add_uint32(a + ".block_count", cfg["layers"])
    w.add_uint32(a + ".context_length", cfg["ctx"])
    w.add_uint32(a + ".embedding_length", cfg["E"])
    w.add_uint32(a + ".feed_forward_length", cfg["F"])
    w.add_uint32(a + ".attention.head_count", cfg["H"])
    w.add_uint32(a + ".attention.head_count_kv", cfg["KV"])
    w.add_float32(a + ".rope.freq_base", cfg["theta"])
    w.add_float32(a + ".attention.layer_norm_rms_epsilon", cfg["eps"])
    w.add_uint32(a + ".rope.dimension_count", cfg["E"] // cfg["H"])
    w.add_uint32(a + ".vocab_size", cfg["V"])
    if rope_type:
        w.add_string(a + ".rope.scaling.type", rope_type)
        w.add_float32(a + ".rope.scaling.factor", 2.0)
    for name, t in tensors.items():
        if name in skip:
            continue
        if override and name in override:
            data, raw = override[name]
            w.add_tensor(name, data, raw_dtype=raw)
        elif quant is not None and t.ndim == 2 and t.shape[1] % 32 == 0:
            w.add_tensor(name, quants.quantize(t, quant), raw_dtype=quant)
        else:
            w.add_tensor(name, np.ascontiguousarray(t, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def from_folder(folder):
    with open(os.path.join(folder, "config.json")) as f:
        c = json.load(f)
    cfg = {"layers": c["num_hidden_layers"], "E": c["hidden_size"],
           "F": c["intermediate_size"], "H": c["num_attention_heads"],
           "KV": c["num_key_value_heads"], "V": c["vocab_size"],
           "ctx": c["max_position_embeddings"], "eps": c["rms_norm_eps"],
           "theta": c["rope_parameters"]["rope_theta"]}
    st = load_file(os.path.join(folder, "model.safetensors"))
    t = {"token_embd.weight": st["model.embed_tokens.weight"],
         "output_norm.weight": st["model.norm.weight"],
         "output.weight": st["lm_head.weight"]}
    names = {"attn_norm": "input_layernorm", "ffn_norm":
             "post_attention_layernorm", "attn_q": "self_attn.q_proj",
             "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj",
             "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    for layer in range(cfg["layers"]):
        for g, h in names.items():
            x = st["model.layers.%d.%s.weight" % (layer, h)]
            if g == "attn_q":
                x = permute(x, cfg["H"])
            if g == "attn_k":
                x = permute(x, cfg["KV"])
            t["blk.%d.%s.weight" % (layer, g)] = x
    return cfg, t


def tiny():
    rng = np.random.default_rng(11)
    cfg = {"layers": 1, "E": 8, "F": 256, "H": 2, "KV": 1, "V": 16,
           "ctx": 64, "eps": 1e-5, "theta": 10000.0}
    E, F, V, KV = cfg["E"], cfg["F"], cfg["V"], 4

    def r(*s):
        return (0.2 * rng.standard_normal(s)).astype(np.float32)

    t = {"token_embd.weight": r(V, E), "output_norm.weight": 1 + r(E),
         "blk.0.attn_norm.weight": 1 + r(E), "blk.0.attn_q.weight": r(E, E),
         "blk.0.attn_k.weight": r(KV, E), "blk.0.attn_v.weight": r(KV, E),
         "blk.0.attn_output.weight": r(E, E),
         "blk.0.ffn_norm.weight": 1 + r(E), "blk.0.ffn_gate.weight": r(F, E),
         "blk.0.ffn_up.weight": r(F, E), "blk.0.ffn_down.weight": r(E, F)}
    return cfg, t


def main():
    os.makedirs(OUT, exist_ok=True)
    cfg, t = from_folder(os.path.join(HERE, "data", "llama", "llama_gqa"))
    write(os.path.join(OUT, "llama_gqa.gguf"), cfg, t)
    write(os.path.join(OUT, "llama_gqa_q8.gguf"), cfg, t, quant=Q.Q8_0)
    cfg, t = tiny()
    p = os.path.join
    write(p(OUT, "tied.gguf"), cfg, t)
    write(p(OUT, "arch_gemma.gguf"), cfg, t, arch="gemma")
    write(p(OUT, "missing.gguf"), cfg, t, skip=("blk.0.ffn_up.weight",))
    bad = dict(t)
    bad["blk.0.attn_k.weight"] = np.concatenate(
        [t["blk.0.attn_k.weight"], t["blk.0.attn_k.weight"][:1]])
    write(p(OUT, "shape.gguf"), cfg, bad)
    # Q6_K: 210 bytes a block of 256 values (the bytes need not be a real
    # quantization: the loader refuses the type by name)
    raw = np.random.default_rng(3).integers(0, 256, (8, 210), dtype=np.uint8)
    write(p(OUT, "q6k.gguf"), cfg, t,
          override={"blk.0.ffn_down.weight": (raw, Q.Q6_K)})
    write(p(OUT, "rope_yarn.gguf"), cfg, t, rope_type="yarn")
    print("wrote", OUT, sorted(os.listdir(OUT)))


if __name__ == "__main__":
    main()

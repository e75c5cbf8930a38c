"""Speed of a Llama-family model in attn against transformers on PyTorch,
in one run on the same machine: a model of SmolLM2-135M's shape (hidden
576, 30 layers, 9 heads, 3 KV heads, intermediate 1536, vocab 49152, tied)
with random weights, prefill of 512 tokens and greedy decode of 128, f32,
2 threads each. Prints tokens/s of both, their ratio, and decode against
the memory-bandwidth bound (the bytes of weights and KV cache read per
token over the read bandwidth this run measures with a large copy).

Needs PyTorch and transformers (no test runs this):

    python3 -m venv /tmp/venv-torch
    /tmp/venv-torch/bin/pip install torch transformers safetensors numpy
    ATTN_LIBRARY=build/libattn.so PYTHONPATH=python \
        /tmp/venv-torch/bin/python bench/llama_speed.py [--small]

--small runs a 4-layer model of the same width (a quick look).
"""
import os
import sys
import tempfile
import time

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import attn

THREADS = 2
PREFILL, DECODE = 512, 128


def read_bandwidth():
    """Bytes per second of reading a 512 MiB array (best of 3 sums)."""
    a = np.ones(128 * 1024 * 1024, np.float32)
    best = 1e9
    for _ in range(3):
        t = time.perf_counter()
        a.sum()
        best = min(best, time.perf_counter() - t)
    return a.nbytes / best


def main():
    small = "--small" in sys.argv
    torch.set_num_threads(THREADS)
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    cfg = LlamaConfig(vocab_size=49152, hidden_size=576,
                      num_hidden_layers=4 if small else 30,
                      num_attention_heads=9, num_key_value_heads=3,
                      intermediate_size=1536, max_position_embeddings=2048,
                      tie_word_embeddings=True, rope_theta=100000.0,
                      rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=None)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    rng = np.random.default_rng(0)
    prompt = rng.integers(1, cfg.vocab_size, PREFILL).tolist()
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        m = attn.load_model(d)
        m.threads = THREADS
        # prefill: the logits of the whole prompt (the full forward)
        t = time.perf_counter()
        z = m.logits(prompt)
        attn_prefill = time.perf_counter() - t
        # decode: the time between the first and the last new token
        stamps = []
        out = m.generate(prompt, max_new_tokens=DECODE, eos_token_id=-1,
                         callback=lambda i: stamps.append(time.perf_counter()))
        attn_decode = (stamps[-1] - stamps[0]) * DECODE / (DECODE - 1)
    ids = torch.tensor([prompt])
    with torch.no_grad():
        t = time.perf_counter()
        zt = model(ids).logits[0].numpy()
        torch_prefill = time.perf_counter() - t
        # decode: one token a step on transformers' KV cache, greedy
        res = model(ids, use_cache=True)
        pkv, nxt = res.past_key_values, res.logits[0, -1].argmax()
        seq = [int(nxt)]
        t = time.perf_counter()
        for _ in range(DECODE - 1):
            res = model(nxt.view(1, 1), past_key_values=pkv, use_cache=True)
            pkv, nxt = res.past_key_values, res.logits[0, -1].argmax()
            seq.append(int(nxt))
        torch_decode = (time.perf_counter() - t) * DECODE / (DECODE - 1)
    err = np.abs(z - zt).max() / np.abs(zt).max()
    same = out[PREFILL:] == seq
    bw = read_bandwidth()
    params = m.param_count()
    L = cfg.num_hidden_layers
    kv_bytes = 2 * L * 3 * 64 * 4 * (PREFILL + DECODE / 2)  # mean cache read
    bound = bw / (params * 4 + kv_bytes)
    print("model: %d layers, %.1f M parameters (f32), %d threads" %
          (L, params / 1e6, THREADS))
    print("logits vs transformers: %.2g of the largest; greedy %s" %
          (err, "identical" if same else "DIFFERS"))
    print("prefill %d: attn %.1f tok/s, transformers %.1f tok/s, ratio %.2f" %
          (PREFILL, PREFILL / attn_prefill, PREFILL / torch_prefill,
           torch_prefill / attn_prefill))
    print("decode %d: attn %.1f tok/s, transformers %.1f tok/s, ratio %.2f" %
          (DECODE, DECODE / attn_decode, DECODE / torch_decode,
           torch_decode / attn_decode))
    print("read bandwidth %.1f GB/s: decode bound %.1f tok/s; attn at %.2f "
          "of it" % (bw / 1e9, bound, DECODE / attn_decode / bound))


if __name__ == "__main__":
    main()

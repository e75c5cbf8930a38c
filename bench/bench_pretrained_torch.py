#!/usr/bin/env python3
"""attn against PyTorch / sentence-transformers on the same model, by hand
(PyTorch is not a dependency of attn):

  python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch sentence-transformers
  (without sentence-transformers, transformers' BertModel with the model's
  mean pooling and normalization stands in for it)
  ATTN_LIBRARY=build/libattn.so /tmp/tv/bin/python bench/bench_pretrained_torch.py MODEL_DIR

Prints (1) the agreement of the sentence embeddings of 20 sentences
(sentence-transformers' encode vs attn.load_model(dir).embed) and (2)
sentences/s on batches of 32 x 128 tokens at 2 threads, PyTorch's BertModel
forward (torch.inference_mode, float32) and attn's, timed alternately in
one process so that both see the same machine load.
"""
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import attn  # noqa: E402
try:
    from sentence_transformers import SentenceTransformer  # noqa: E402
except ImportError:  # transformers alone: the model's pooling by hand
    SentenceTransformer = None

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

SENTENCES = [
    "Hi.", "The cat sat on the mat because it was tired", "A man is playing a guitar.",
    "Stock markets fell sharply on Monday after the announcement.", "I love you",
    "Café crème, naïve résumé!", "東京は日本の首都です。", "What is the capital of France?",
    "Paris", "The quick brown fox jumps over the lazy dog near the riverbank at dawn.",
    "3.14159 is approximately pi; e is about 2.71828.", "unbelievably antidisestablishmentarianism",
    "She said: \"don't go there\" -- and left.",
    "Machine learning models can learn representations of text that capture meaning, "
    "and sentence embeddings are one such representation used for semantic search.",
    "ok", "Two dogs run through a field of tall grass while the sun sets behind the hills.",
    "Москва — столица России.", "@user #hashtag https://example.com/path?q=1",
    "The weather today is sunny with a chance of rain in the evening, so bring an umbrella "
    "just in case, because the forecast has been wrong before and nobody likes getting wet "
    "on the way home from work.", "End.",
]


def hf_embed(d):
    """The model's sentence embeddings by transformers alone (mean over the
    tokens, then unit length, as its 1_Pooling and 2_Normalize say)."""
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(d)
    bert = transformers.AutoModel.from_pretrained(d).eval()
    enc = tok(SENTENCES, padding=True, truncation=True, max_length=256,
              return_tensors="pt")
    with torch.inference_mode():
        h = bert(**enc).last_hidden_state
    w = enc["attention_mask"].unsqueeze(-1).float()
    e = (h * w).sum(1) / w.sum(1).clamp(min=1e-9)
    e = torch.nn.functional.normalize(e, dim=1)
    return e.numpy(), bert, "transformers %s" % transformers.__version__


def main():
    d = sys.argv[1]
    threads = 2
    torch.set_num_threads(threads)
    m = attn.load_model(d)
    if SentenceTransformer is not None:
        st = SentenceTransformer(d, device="cpu")
        ref = st.encode(SENTENCES, batch_size=32, convert_to_numpy=True)
        bert, peer = st[0].auto_model.eval(), "sentence-transformers %s" % (
            __import__("sentence_transformers").__version__)
    else:
        ref, bert, peer = hf_embed(d)
    got = m.embed(SENTENCES, threads=threads)
    cos = (ref * got).sum(1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(got, axis=1)
    print("embeddings of 20 sentences vs %s (torch %s): "
          "min cosine %.8f, max abs err %.2e" % (
              peer, torch.__version__, cos.min(), np.abs(ref - got).max()))
    B, L = 32, 128
    rng = np.random.default_rng(16)
    ids = rng.integers(1000, 30522, size=(B, L)).astype(np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    tids = torch.from_numpy(ids)
    mask = torch.ones_like(tids)
    t_torch, t_attn = [], []
    with torch.inference_mode():
        bert(input_ids=tids, attention_mask=mask)  # warm-up
        m.forward(ids.astype(np.int32), threads=threads)
        for _ in range(3):
            t0 = time.perf_counter()
            out = bert(input_ids=tids, attention_mask=mask).last_hidden_state
            t_torch.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            h = m.forward(ids.astype(np.int32), threads=threads)
            t_attn.append(time.perf_counter() - t0)
    err = float(np.abs(out.numpy() - h).max())
    bt, ba = min(t_torch), min(t_attn)
    print("batch %d x %d, %d threads, best of 3: PyTorch %.0f ms (%.1f sentences/s), "
          "attn %.0f ms (%.1f sentences/s); attn / PyTorch time %.2f; hidden states "
          "agree to %.1e" % (B, L, threads, bt * 1e3, B / bt, ba * 1e3, B / ba, ba / bt, err))


main()

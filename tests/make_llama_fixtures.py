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

Each folder NAME holds the checkpoint and prompt_K.npy (int64 ids),
logits_K.npy (float32, (L, V)), greedy_K.npy (int64: the prompt and the
new ids, as generate returns them).
"""
import os
import shutil

import numpy as np
import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama")

COMMON = dict(vocab_size=96, hidden_size=32, num_hidden_layers=2,
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

PROMPTS = [[1, 17, 33, 5, 80, 41, 9], [1, 60], [1] + list(range(3, 40, 3))]


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
        for k, prompt in enumerate(PROMPTS):
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
        print(name, "transformers", transformers.__version__,
              sorted(os.listdir(out)))


if __name__ == "__main__":
    main()

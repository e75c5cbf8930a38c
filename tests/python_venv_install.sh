#!/bin/bash
# A fresh machine's view of the Python package: a new venv, one
# `pip install ./python` (the C library is built by scikit-build-core), then
# one attention computed with no environment variables, checked by NumPy.
# Usage: python_venv_install.sh SOURCE_DIR WORK_DIR
set -euo pipefail
src=$1
work=$2
rm -rf "$work"
/usr/bin/python3 -m venv "$work"
cd "$src"
"$work/bin/python" -m pip install -q --disable-pip-version-check ./python
cd "$work"
env -u ATTN_LIBRARY -u PYTHONPATH "$work/bin/python" - <<'PY'
import os
import numpy as np
import attn

# the library inside the package, not a build tree's
lib = attn.library_path()
assert os.path.dirname(lib) == os.path.dirname(attn.__file__), lib
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((2, 4, 16, 8)).astype(np.float32) for _ in range(3))
out = attn.scaled_dot_product_attention(q, k, v, is_causal=True)
s = q.astype(np.float64) @ k.swapaxes(-1, -2) / np.sqrt(8)
s[..., np.triu(np.ones((16, 16), bool), 1)] = -np.inf
w = np.exp(s - s.max(-1, keepdims=True))
want = (w / w.sum(-1, keepdims=True)) @ v
err = float(np.abs(out - want).max())
assert err < 1e-5, err
print("attn", attn.version(), "from", lib, "max error", err)
PY
rm -rf "$work"

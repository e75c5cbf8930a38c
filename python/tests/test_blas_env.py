"""OpenBLAS's kernels: the package names the core of the CPU's vector
width before anything loads OpenBLAS (Debian's OpenBLAS takes some
virtual Xeons for a Prescott), and keeps a core the user named."""

import ctypes
import os
import subprocess
import sys

import attn
from attn._blas_env import prefer_blas_core

AVX512 = "fpu sse2 avx avx2 fma avx512f avx512bw avx512dq avx512vl"


def cpuinfo(tmp_path, flags):
    p = tmp_path / "cpuinfo"
    p.write_text("processor\t: 0\nflags\t\t: %s\n\nprocessor\t: 1\n" % flags)
    return str(p)


def test_core_from_flags(tmp_path):
    for flags, want in [(AVX512, "SkylakeX"), ("sse2 avx avx2 fma", "Haswell"),
                        ("sse2 avx avx512f avx2 fma", "Haswell"),
                        ("sse2 avx", None), ("", None)]:
        env = {}
        assert prefer_blas_core(env, cpuinfo(tmp_path, flags)) == want, flags
        assert env.get("OPENBLAS_CORETYPE") == want


def test_users_core_kept(tmp_path):
    env = {"OPENBLAS_CORETYPE": "Prescott"}
    assert prefer_blas_core(env, cpuinfo(tmp_path, AVX512)) is None
    assert env == {"OPENBLAS_CORETYPE": "Prescott"}


def test_no_cpuinfo(tmp_path):
    env = {}
    assert prefer_blas_core(env, str(tmp_path / "missing")) is None
    assert env == {}


def test_loaded_core():
    """In a fresh interpreter, `import attn` first: the OpenBLAS that
    libattn uses runs kernels of the CPU's width (printed)."""
    code = ("import attn, ctypes\n"
            "f = ctypes.CDLL('libopenblas.so.0').openblas_get_corename\n"
            "f.restype = ctypes.c_char_p\n"
            "print(f().decode())\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(attn.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(
        [pkg] + [p for p in [env.get("PYTHONPATH")] if p])
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, check=True)
    core = out.stdout.strip()
    want = prefer_blas_core({})
    print("CPU flags want %s; OpenBLAS runs %s" % (want, core))
    if want == "SkylakeX":
        assert core in ("SkylakeX", "Cooperlake", "SapphireRapids"), core
    elif want == "Haswell":
        assert core in ("Haswell", "Zen", "SkylakeX", "Cooperlake",
                        "SapphireRapids"), core

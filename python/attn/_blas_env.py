"""OpenBLAS's kernels for this CPU, chosen before anything loads OpenBLAS.

Imported first by the package (before NumPy, whose Debian build loads the
same OpenBLAS): only standard-library imports here."""
import os


def prefer_blas_core(environ=os.environ, cpuinfo="/proc/cpuinfo"):
    """OpenBLAS reads OPENBLAS_CORETYPE once, when it is loaded (with
    libattn.so, or with NumPy where NumPy uses the system's OpenBLAS).
    Debian's OpenBLAS takes some virtual Xeons for a Prescott and runs SSE3
    kernels, several times slower than its AVX-512 ones; the CLI corrects
    that by starting itself again (see src/kernels/blas.h), the package by
    naming the core from the CPU's flags before loading: SkylakeX with
    AVX-512 F/BW/DQ/VL, Haswell with AVX2 and FMA (the sgemm kernels of
    every newer core of the same width). A value the user set is kept.
    Returns the core set, or None."""
    if "OPENBLAS_CORETYPE" in environ:
        return None
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
            else:
                return None
    except OSError:
        return None
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        core = "SkylakeX"
    elif {"avx2", "fma"} <= flags:
        core = "Haswell"
    else:
        return None
    environ["OPENBLAS_CORETYPE"] = core
    return core


prefer_blas_core()

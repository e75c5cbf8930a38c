"""The ring's C example built the way the documentation says, from an
installed prefix: `cmake --install BUILD --prefix P` writes attn_dist.pc
beside attn.pc, and each documented `mpicc ring.c ...` line (shared
libattn with an rpath, then the static libraries) builds
tests/dist/readme_ring.c against P alone; both programs run under mpirun
with 2 ranks and print the same line. The shared one loads libattn.so from
P (libattn.so exports the few internal functions libattn_dist calls, so
`-lattn_dist -lattn` resolves), the static one loads no libattn.so.

usage: cli_ring_install.py PATH/TO/attn SOURCE_DIR MPIEXEC
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

from clitest import ATTN, SRC, check, summary

MPIEXEC = sys.argv[3]


def sh(cmd, env=None, cwd=None):
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def documented_lines():
    """The `mpicc ring.c ...` lines of README.md and docs/*.md."""
    lines = []
    for path in [os.path.join(SRC, "README.md")] + sorted(
            glob.glob(os.path.join(SRC, "docs", "*.md"))):
        for line in open(path, encoding="utf-8").read().splitlines():
            if line.strip().startswith("mpicc ring.c"):
                lines.append(line.strip())
    return lines


def main():
    build = os.path.dirname(os.path.abspath(ATTN))
    links = documented_lines()
    check(len(links) == 2, "the docs give two link lines 'mpicc ring.c ...' "
          "(shared, static), found %d: %r" % (len(links), links))
    tmp = tempfile.mkdtemp(prefix="attn_ring_install_")
    try:
        prefix = os.path.join(tmp, "prefix")
        p = subprocess.run(["cmake", "--install", build, "--prefix", prefix],
                           capture_output=True, text=True)
        check(p.returncode == 0, "cmake --install --prefix: " + p.stderr[-500:])
        pcs = glob.glob(os.path.join(prefix, "**", "attn_dist.pc"), recursive=True)
        check(len(pcs) == 1, "one attn_dist.pc installed, found %r" % pcs)
        if len(pcs) != 1:
            return summary("cli_ring_install")
        pcdir = os.path.dirname(pcs[0])
        check(os.path.exists(os.path.join(pcdir, "attn.pc")),
              "attn_dist.pc stands beside attn.pc")
        env = dict(os.environ, PKG_CONFIG_PATH=pcdir)
        env.pop("LD_LIBRARY_PATH", None)
        p = sh("pkg-config --libs attn_dist", env=env)
        words = p.stdout.split()
        check(p.returncode == 0 and "-lattn_dist" in words and "-lattn" in words
              and words.index("-lattn_dist") < words.index("-lattn"),
              "pkg-config --libs attn_dist names -lattn_dist before -lattn: "
              "%r %r" % (p.stdout, p.stderr))
        shutil.copy(os.path.join(SRC, "tests", "dist", "readme_ring.c"),
                    os.path.join(tmp, "ring.c"))
        san = (" -fsanitize=address,undefined"
               if os.environ.get("ATTN_SANITIZED") else "")
        outs = []
        for kind, line in zip(("shared", "static"), links):
            p = sh(line + san, env=env, cwd=tmp)
            check(p.returncode == 0, "%s link: %s\n%s" % (kind, line,
                                                         p.stderr[-1500:]))
            if p.returncode:
                continue
            r = subprocess.run([MPIEXEC, "-np", "2", "--oversubscribe",
                                "--allow-run-as-root", "--bind-to", "none",
                                os.path.join(tmp, "ring")],
                               capture_output=True, text=True, env=env,
                               timeout=120)
            check(r.returncode == 0 and r.stdout.startswith("rank 0 of 2:"),
                  "%s ring example runs: rc %d, %r %r"
                  % (kind, r.returncode, r.stdout, r.stderr[-500:]))
            outs.append(r.stdout)
            ldd = sh("ldd ./ring", env=env, cwd=tmp).stdout
            if kind == "shared":
                check(prefix in ldd, "shared ring example loads libattn from "
                      "the prefix:\n" + ldd)
            else:
                check("libattn" not in ldd,
                      "static ring example has no libattn.so:\n" + ldd)
            os.remove(os.path.join(tmp, "ring"))
        check(len(outs) == 2 and outs[0] == outs[1], "same output: %r" % outs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("cli_ring_install")


if __name__ == "__main__":
    sys.exit(main())

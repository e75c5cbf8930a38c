"""Installing into a prefix of one's own, as the README says: `cmake
--install BUILD --prefix P` writes an attn.pc whose prefix is P, `make
install PREFIX=P` passes the prefix on, and the README's two link lines
(shared with an rpath, static) build the README example against P with
pkg-config; both programs run and print the same line.

usage: cli_install.py PATH/TO/attn SOURCE_DIR   (the build dir is attn's)
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

from clitest import ATTN, SRC, check, summary


def sh(cmd, env=None, cwd=None):
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True,
                          env=env, cwd=cwd)


def main():
    build = os.path.dirname(os.path.abspath(ATTN))
    readme = open(os.path.join(SRC, "README.md")).read()
    section = readme.split("## C example", 1)[1].split("\n## ", 1)[0]
    links = [l.strip() for l in section.splitlines()
             if l.strip().startswith("cc example.c")]
    check(len(links) == 2, "README: two link lines 'cc example.c ...' "
          "(shared, static), found %d" % len(links))
    check("LD_LIBRARY_PATH" in section and "rpath" in section,
          "README says what a shared-library user sets (rpath or "
          "LD_LIBRARY_PATH)")
    tmp = tempfile.mkdtemp(prefix="attn_install_")
    try:
        prefix = os.path.join(tmp, "prefix")
        p = subprocess.run(["cmake", "--install", build, "--prefix", prefix],
                           capture_output=True, text=True)
        check(p.returncode == 0, "cmake --install --prefix: " + p.stderr[-500:])
        pcs = [os.path.join(d, f) for d, _, fs in os.walk(prefix) for f in fs
               if f == "attn.pc"]
        check(len(pcs) == 1, "one attn.pc installed, found %r" % pcs)
        if not pcs:
            return summary("cli_install")
        pc = open(pcs[0]).read()
        check(re.search(r"^prefix=%s$" % re.escape(prefix), pc, re.M),
              "attn.pc has prefix=%s:\n%s" % (prefix, pc))
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pcs[0]))
        env.pop("LD_LIBRARY_PATH", None)
        shutil.copy(os.path.join(SRC, "tests", "test_readme_example.c"),
                    os.path.join(tmp, "example.c"))
        # a sanitized build's libraries need the sanitizers at link time
        san = " -fsanitize=address,undefined" if os.environ.get("ATTN_SANITIZED") else ""
        outs = []
        for kind, line in zip(("shared", "static"), links):
            p = sh(line + san, env=env, cwd=tmp)
            check(p.returncode == 0, "%s link: %s\n%s" % (kind, line, p.stderr[-800:]))
            if p.returncode:
                continue
            r = subprocess.run([os.path.join(tmp, "example")], capture_output=True,
                               text=True, env=env)
            check(r.returncode == 0 and r.stdout.startswith("out[0, :3] = "),
                  "%s example runs: rc %d, %r %r" % (kind, r.returncode,
                                                     r.stdout, r.stderr[-300:]))
            outs.append(r.stdout)
            ldd = sh("ldd ./example", env=env, cwd=tmp).stdout
            if kind == "shared":
                check(prefix in ldd, "shared example loads libattn from the "
                      "prefix:\n" + ldd)
            else:
                check("libattn" not in ldd, "static example has no libattn.so:\n" + ldd)
            os.remove(os.path.join(tmp, "example"))
        check(len(outs) == 2 and outs[0] == outs[1], "same output: %r" % outs)
        # make install PREFIX=... hands the prefix to cmake --install
        p = subprocess.run(["make", "-n", "install", "PREFIX=/opt/x y",
                            "BUILD=" + build], capture_output=True, text=True,
                           cwd=SRC)
        check(p.returncode == 0 and
              re.search(r'cmake --install \S+ --prefix "/opt/x y"', p.stdout),
              "make install PREFIX is passed on:\n" + p.stdout[-500:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("cli_install")


if __name__ == "__main__":
    sys.exit(main())

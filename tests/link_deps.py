"""Build seams: a program that uses SDPA alone (the README's first
example), linked against libattn.so, needs neither cairo nor MPI; the
library itself carries cairo for its pictures; attn.pc names cairo only
where a static link needs it (Requires.private), never in Libs.

usage: link_deps.py PROGRAM LIBATTN_SO SOURCE_DIR LINK_COMMAND_FILE

LINK_COMMAND_FILE is the program's link command as the build wrote it
(a linker that drops unused libraries would hide a cairo on that line
from the program's NEEDED entries)."""
import os
import re
import subprocess
import sys


def needed(path):
    out = subprocess.run(["readelf", "-d", path], check=True,
                         capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def main():
    prog, lib, src, link = sys.argv[1:5]
    fails = []
    line = open(link).read()
    for dep in ("cairo", "mpi"):
        if dep in line:
            fails.append(f"the SDPA-only program's link line names {dep}: {line}")
    pn = needed(prog)
    if not any(n.startswith("libattn.so") for n in pn):
        fails.append(f"{prog} does not need libattn.so: {pn}")
    for n in pn:
        if re.search(r"cairo|mpi", n):
            fails.append(f"an SDPA-only program needs {n} (all: {pn})")
    ln = needed(lib)
    if not any("cairo" in n for n in ln):
        fails.append(f"libattn.so does not need cairo: {ln}")
    run = subprocess.run([prog], capture_output=True, text=True)
    if run.returncode != 0 or "out[0, :3]" not in run.stdout:
        fails.append(f"the program failed: {run.returncode} {run.stderr!r}")
    pc = open(os.path.join(src, "attn.pc.in")).read()
    libs = re.search(r"^Libs:(.*)$", pc, re.M).group(1)
    priv = re.search(r"^Requires\.private:(.*)$", pc, re.M)
    if "cairo" in libs or re.search(r"^Requires:.*cairo", pc, re.M):
        fails.append("attn.pc makes every program link cairo")
    if not priv or "cairo" not in priv.group(1):
        fails.append("attn.pc does not name cairo for static links")
    for f in fails:
        print("FAIL:", f)
    print("link_deps:", "FAILED" if fails else f"ok (program needs {pn})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

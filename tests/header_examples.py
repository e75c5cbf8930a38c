"""Every example in every public header compiles and runs.

An example is marked in a header comment by a line that begins
"Example:" (" * Example: causal self-attention ..."); the code is
the block that follows, indented by four spaces past the comment's " * "
(blank comment lines may stand inside it). The block is the body of a
main() that includes <math.h>, <stdio.h>, <stdlib.h>, <string.h> and the
header; it must build with -Wall -Wextra -Werror against libattn.a and
exit 0 (run in a scratch directory, where it may write files).
attn.h must have one: the opening example.

usage: header_examples.py SOURCE_DIR OUT_DIR LIBATTN_A CC "CFLAGS" "LIBS"
"""
import glob
import os
import re
import shlex
import subprocess
import sys

MARK = re.compile(r"^\s*\*?\s*Example:")
CODE = re.compile(r"^\s*\* {5}(.*)$")
BLANK = re.compile(r"^\s*\*\s*$")


def examples(path):
    """(line number, code) of each marked example of a header."""
    lines = open(path).read().split("\n")
    found = []
    for n, line in enumerate(lines):
        if not MARK.match(line):
            continue
        code, i = [], n + 1
        while i < len(lines):
            m = CODE.match(lines[i])
            if m:
                code.append(m.group(1))
            elif BLANK.match(lines[i]):
                code.append("")
            else:
                break
            i += 1
        while code and code[-1] == "":
            code.pop()
        while code and code[0] == "":
            code.pop(0)
        found.append((n + 1, "\n".join(code)))
    return found


def program(header, code):
    body = "\n".join(("    " + l) if l else "" for l in code.split("\n"))
    return ("#include <math.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
            "#include <string.h>\n\n#include \"%s\"\n\nint main(void) {\n"
            "%s\n    return 0;\n}\n" % (header, body))


def main():
    src, out, lib, cc, cflags, libs = sys.argv[1:7]
    os.makedirs(out, exist_ok=True)
    passed = failed = 0
    headers = sorted(glob.glob(os.path.join(src, "include", "attn*.h")))
    for path in headers:
        name = os.path.basename(path)
        found = examples(path)
        if name == "attn.h" and not found:
            print("FAIL attn.h has no example")
            failed += 1
        for k, (line, code) in enumerate(found):
            where = "%s:%d" % (name, line)
            if not code.strip():
                print("FAIL %s: an Example line with no indented code after it"
                      % where)
                failed += 1
                continue
            stem = "%s_%d" % (name[:-2], k + 1)
            work = os.path.join(out, stem)
            os.makedirs(work, exist_ok=True)
            c_file = os.path.join(work, stem + ".c")
            exe = os.path.join(work, stem)
            with open(c_file, "w") as f:
                f.write(program(name, code))
            cmd = ([cc, "-std=c11", "-Wall", "-Wextra", "-Werror"] +
                   shlex.split(cflags) +
                   ["-I", os.path.join(src, "include"), c_file, lib, "-o", exe] +
                   shlex.split(libs))
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print("FAIL %s does not compile (%s):\n%s" % (where, c_file,
                                                              r.stderr))
                failed += 1
                continue
            try:
                r = subprocess.run([exe], cwd=work, capture_output=True,
                                   text=True, timeout=120)
                ok = r.returncode == 0
                why = "exit status %d:\n%s%s" % (r.returncode, r.stdout,
                                                  r.stderr)
            except subprocess.TimeoutExpired:
                ok, why = False, "ran past 120 s"
            if not ok:
                print("FAIL %s: %s" % (where, why))
                failed += 1
                continue
            print("ok %s (%d lines)" % (where, code.count("\n") + 1))
            passed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())

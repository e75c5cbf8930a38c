"""The README's C example is tests/test_readme_example.c, character for
character, so the example people copy is one that compiles and runs (CTest
builds and runs that file as test_readme_example).

usage: cli_readme.py PATH/TO/attn SOURCE_DIR
"""
import os
import re
import sys


def main():
    src = sys.argv[2]
    readme = open(os.path.join(src, "README.md")).read()
    example = open(os.path.join(src, "tests", "test_readme_example.c")).read()
    section = readme.split("## C example", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```c\n(.*?)```", section, re.S)
    ok = len(blocks) == 1 and blocks[0] == example
    if not ok:
        print("FAIL the C block under '## C example' differs from "
              "tests/test_readme_example.c (%d c blocks found)" % len(blocks))
    print("%d passed, %d failed" % (int(ok), int(not ok)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The README's C example is tests/test_readme_example.c, character for
character, so the example people copy is one that compiles and runs (CTest
builds and runs that file as test_readme_example); likewise its ring
example and tests/dist/readme_ring.c (readme_ring, under mpirun), and the
score-modifier and user-function sections' code and
tests/test_readme_score_mods.c, tests/test_readme_user_mods.c.

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
    # the score-modifier section's C lines are the part of
    # tests/test_readme_score_mods.c between its README markers
    mods = open(os.path.join(src, "tests", "test_readme_score_mods.c")).read()
    part = mods.split("/* README begin */\n", 1)[1].split("    /* README end */", 1)[0]
    part = "\n".join(line[4:] for line in part.splitlines()) + "\n"
    sec = readme.split("## Soft-capping, ALiBi, sinks and documents", 1)
    blocks3 = re.findall(r"```c\n(.*?)```", sec[1].split("\n## ", 1)[0], re.S) \
        if len(sec) == 2 else []
    ok3 = len(blocks3) == 1 and blocks3[0] == part
    if not ok3:
        print("FAIL the C block under '## Soft-capping, ALiBi, sinks and "
              "documents' differs from tests/test_readme_score_mods.c's README "
              "part (%d c blocks found)" % len(blocks3))
    # the packed-documents section: tests/test_readme_docs.c's README part
    docs = open(os.path.join(src, "tests", "test_readme_docs.c")).read()
    part = docs.split("/* README begin */\n", 1)[1].split("    /* README end */", 1)[0]
    part = "\n".join(line[4:] for line in part.splitlines()) + "\n"
    sec = readme.split("## Packed documents: cu_seqlens, a KV cache, a ring", 1)
    blocks4 = re.findall(r"```c\n(.*?)```", sec[1].split("\n## ", 1)[0], re.S) \
        if len(sec) == 2 else []
    ok4 = len(blocks4) == 1 and blocks4[0] == part
    if not ok4:
        print("FAIL the C block under '## Packed documents: cu_seqlens, a KV "
              "cache, a ring' differs from tests/test_readme_docs.c's README "
              "part (%d c blocks found)" % len(blocks4))
    # the ring example: tests/dist/readme_ring.c (run under mpirun)
    ring = open(os.path.join(src, "tests", "dist", "readme_ring.c")).read()
    section = readme.split("## Across processes and machines", 1)[-1]
    section = section.split("\n## ", 1)[0]
    blocks = re.findall(r"```c\n(.*?)```", section, re.S)
    ok2 = len(blocks) == 1 and blocks[0] == ring
    if not ok2:
        print("FAIL the C block under '## Across processes and machines' "
              "differs from tests/dist/readme_ring.c (%d c blocks found)"
              % len(blocks))
    # the user functions' section: tests/test_readme_user_mods.c's part
    # between its README markers (top-level code, not indented)
    um = open(os.path.join(src, "tests", "test_readme_user_mods.c")).read()
    part5 = um.split("/* README begin */\n", 1)[1].split("/* README end */", 1)[0]
    sec5 = readme.split("## User score and mask functions", 1)
    blocks5 = re.findall(r"```c\n(.*?)```", sec5[1].split("\n## ", 1)[0], re.S) \
        if len(sec5) == 2 else []
    ok5 = len(blocks5) == 1 and blocks5[0] == part5
    if not ok5:
        print("FAIL the C block under '## User score and mask functions' "
              "differs from tests/test_readme_user_mods.c's README part (%d c "
              "blocks found)" % len(blocks5))
    passed = int(ok) + int(ok2) + int(ok3) + int(ok4) + int(ok5)
    print("%d passed, %d failed" % (passed, 5 - passed))
    return 0 if ok and ok2 and ok3 and ok4 and ok5 else 1


if __name__ == "__main__":
    sys.exit(main())

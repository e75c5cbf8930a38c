"""The README's C example is tests/test_readme_example.c, character for
character, so the example people copy is one that compiles and runs (CTest
builds and runs that file as test_readme_example); likewise its ring
example and tests/dist/readme_ring.c (readme_ring, under mpirun), and the
code of the score-modifier, packed-documents and user-function sections
and the README parts of tests/test_readme_score_mods.c,
tests/test_readme_docs.c and tests/test_readme_user_mods.c.

usage: cli_readme.py PATH/TO/attn SOURCE_DIR
"""
import os
import re
import sys


def readme_part(path, indented):
    """The lines of a test between its README markers (or the whole file
    when it has none); indented parts lose their function body's indent."""
    text = open(path).read()
    if "/* README begin */" not in text:
        return text
    end = "    /* README end */" if indented else "/* README end */"
    part = text.split("/* README begin */\n", 1)[1].split(end, 1)[0]
    if indented:
        part = "\n".join(line[4:] for line in part.splitlines()) + "\n"
    return part


def check(readme, src, heading, test, indented=False):
    """1 if the section under heading holds one C block, equal to test's."""
    want = readme_part(os.path.join(src, "tests", *test.split("/")), indented)
    sec = readme.split("## " + heading, 1)
    blocks = re.findall(r"```c\n(.*?)```", sec[1].split("\n## ", 1)[0], re.S) \
        if len(sec) == 2 else []
    ok = len(blocks) == 1 and blocks[0] == want
    if not ok:
        print("FAIL the C block under '## %s' differs from tests/%s (%d c "
              "blocks found)" % (heading, test, len(blocks)))
    return int(ok)


def main():
    src = sys.argv[2]
    readme = open(os.path.join(src, "README.md")).read()
    checks = [
        ("C example", "test_readme_example.c", False),
        ("Soft-capping, ALiBi, sinks and documents",
         "test_readme_score_mods.c", True),
        ("Packed documents: cu_seqlens, a KV cache, a ring",
         "test_readme_docs.c", True),
        ("Across processes and machines", "dist/readme_ring.c", False),
        ("User score and mask functions", "test_readme_user_mods.c", False),
    ]
    passed = sum(check(readme, src, h, t, i) for h, t, i in checks)
    print("%d passed, %d failed" % (passed, len(checks) - passed))
    return 0 if passed == len(checks) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Every C block of README.md and docs/*.md is the source of a test,
character for character, so the code people copy is code that compiles and
runs: BLOCKS names, per page and heading, the file that holds the block
(tests/test_readme_*.c, built and run by CTest as one test each, or
tests/dist/readme_*.c, built and run under mpirun where MPI is found). In a
test file the block is the text between the README markers (the whole file
when it has none), less the first marker's indent. A C block in a page
that BLOCKS does not name fails ("not covered"), as does a block that
differs from its file, a file CMake does not build, and a link or picture
of a page whose target is missing.

usage: cli_readme.py PATH/TO/attn SOURCE_DIR
"""
import glob
import os
import re
import sys

# (page, heading, test file under tests/)
BLOCKS = [
    ("README.md", "C example", "test_readme_example.c"),
    ("docs/masks.md", "Soft-capping, ALiBi, sinks and documents",
     "test_readme_score_mods.c"),
    ("docs/masks.md", "User score and mask functions",
     "test_readme_user_mods.c"),
    ("docs/masks.md", "Packed documents: cu_seqlens, a KV cache, a ring",
     "test_readme_docs.c"),
    ("docs/cache.md", "KV cache and decoding", "test_readme_cache.c"),
    ("docs/ring.md", "Ring attention: across processes and machines",
     "dist/readme_ring.c"),
    ("docs/layers.md", "Layers", "test_readme_layers.c"),
    ("docs/pretrained.md", "Pretrained models", "test_readme_pretrained.c"),
    ("docs/generation.md", "Generation: the whole Transformer",
     "test_readme_generate.c"),
]

BEGIN = re.compile(r"^( *)/\* (README begin|README BEGIN|---- README example ----) \*/$")
END = re.compile(r"^ */\* (README end|README END|---- end of README example ----) \*/$")

failed = []


def fail(msg):
    failed.append(msg)
    print("FAIL " + msg)


def readme_part(path):
    """The lines of a test between its README markers (the whole file when
    it has none), less the first begin marker's indent."""
    lines = open(path).read().split("\n")
    if not any(BEGIN.match(l) for l in lines):
        return "\n".join(lines)
    out, inside, indent = [], False, None
    for line in lines:
        m = BEGIN.match(line)
        if m:
            inside = True
            indent = len(m.group(1)) if indent is None else indent
        elif END.match(line):
            inside = False
        elif inside:
            out.append(line[indent:] if line.startswith(" " * indent) else line)
    return "\n".join(out) + "\n"


def sections(text):
    """{heading text: body up to the next heading of any level}."""
    parts = re.split(r"^#{1,6} (.*)$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def c_blocks(body):
    return re.findall(r"^```c\n(.*?)^```", body, re.S | re.M)


def main():
    src = sys.argv[2]
    pages = ["README.md"] + sorted(
        os.path.relpath(p, src) for p in glob.glob(os.path.join(src, "docs", "*.md")))
    cmake = open(os.path.join(src, "tests", "CMakeLists.txt")).read()
    named = {(p, h) for p, h, _ in BLOCKS}
    for page in pages:
        text = open(os.path.join(src, page), encoding="utf-8").read()
        for heading, body in sections(text).items():
            n = len(c_blocks(body))
            if n and (page, heading) not in named:
                fail("%s, '%s': %d C block(s) not covered by a test (add it to "
                     "BLOCKS in tests/cli_readme.py)" % (page, heading, n))
        # links and pictures resolve, relative to the page
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = os.path.join(src, os.path.dirname(page), target.split("#")[0])
            if not os.path.exists(path):
                fail("%s links to %s, which does not exist" % (page, target))
    for page, heading, test in BLOCKS:
        path = os.path.join(src, page)
        secs = sections(open(path, encoding="utf-8").read()) if os.path.exists(path) else {}
        blocks = c_blocks(secs.get(heading, ""))
        want = readme_part(os.path.join(src, "tests", *test.split("/")))
        if heading not in secs:
            fail("%s has no heading '%s'" % (page, heading))
        elif len(blocks) != 1 or blocks[0] != want:
            fail("the C block under '%s' in %s differs from tests/%s (%d C "
                 "blocks found)" % (heading, page, test, len(blocks)))
        built = ("test_*.c" in cmake if test.startswith("test_") else
                 "dist/" + os.path.basename(test) in cmake)
        if not built:
            fail("tests/CMakeLists.txt does not build tests/%s" % test)
    checks = len(BLOCKS)
    print("%d blocks checked in %d pages, %d failures" % (checks, len(pages), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

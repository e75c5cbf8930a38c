"""The shell blocks of docs/training.md and docs/generation.md run as
written, in order, each page in a fresh folder with `attn` on PATH: they
train the models the pages describe with the pages' defaults, so this runs
in the Release build only (minutes). Every command must succeed, and the
answers the pages show must be what the commands print (EXPECT).

usage: docs_pipelines.py PATH/TO/attn SOURCE_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import docs_blocks  # noqa: E402
from cli_readme import PIPELINES, commands  # noqa: E402


def exact_match(out):
    m = re.search(r"exact match: ([0-9.]+)", out)
    return float(m.group(1)) if m else -1.0


def right(out):
    """A toy model's answer as attn attend prints it is the expected one."""
    pred = re.search(r"^prediction: (.*)$", out, re.M)
    want = re.search(r"^expected: +(.*)$", out, re.M)
    return (pred is not None and want is not None and pred.group(1) == want.group(1)
            and "(wrong)" not in out)


# command -> (what the page claims, a check of its standard output)
EXPECT = {
    'attn attend reverse.bin --input "3 1 4 1 5 9 2 6 5 3 5 8 9 7 9 3" --out maps':
        ("the reversed input", right),
    'attn attend add.bin --input "7 8 9 + 5 4 0"':
        ("987 + 45 = 1032, right", lambda out: right(out) and "1032 (right)" in out),
    "attn eval reverse.bin reverse":
        ("token accuracy 1.0000",
         lambda out: re.search(r"token accuracy: 1\.0000", out) is not None),
    'attn train add --model decoder --save adder.bin && attn generate adder.bin --input "123+456="':
        ("exact match >= 0.95, then 579",
         lambda out: exact_match(out) >= 0.95 and out.strip().splitlines()[-1].strip() == "579"),
    'attn generate date.bin --input "tue 3 march 2026" --input 03/03/26 --input "march 3, 2026"':
        ("2026-03-03 three times",
         lambda out: [l.split()[-1] for l in out.strip().splitlines()] == ["2026-03-03"] * 3),
    "attn eval date.bin": ("exact match >= 0.99", lambda out: exact_match(out) >= 0.99),
}


def main():
    attn, src = sys.argv[1], sys.argv[2]
    failed, seen = [], set()
    root = tempfile.mkdtemp(prefix="attn_pipelines_")
    try:
        bindir = os.path.join(root, "bin")
        os.mkdir(bindir)
        os.symlink(os.path.abspath(attn), os.path.join(bindir, "attn"))
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
        for page in PIPELINES:
            d = os.path.join(root, page.replace("/", "_"))
            os.mkdir(d)
            for heading, code in docs_blocks.page_blocks(src, page, "sh"):
                for cmd in commands(code):
                    p = subprocess.run(["bash", "-c", cmd], cwd=d, env=env,
                                       capture_output=True, text=True, timeout=1200)
                    print("%s: %s -> exit %d" % (page, cmd, p.returncode))
                    last = p.stdout.strip().splitlines()[-3:]
                    print("    " + "\n    ".join(last))
                    if p.returncode != 0:
                        failed.append("%s: '%s' exits %d:\n%s"
                                      % (page, cmd, p.returncode, p.stderr[-800:]))
                    elif cmd in EXPECT:
                        seen.add(cmd)
                        claim, ok = EXPECT[cmd]
                        if not ok(p.stdout):
                            failed.append("%s: '%s' should print %s; it printed:\n%s"
                                          % (page, cmd, claim, p.stdout[-800:]))
        for cmd in set(EXPECT) - seen:
            failed.append("no page runs '%s' any more (EXPECT is stale)" % cmd)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for f in failed:
        print("FAIL " + f)
    print("docs_pipelines: %d failures" % len(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

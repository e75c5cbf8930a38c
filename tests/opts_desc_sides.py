"""Every option the one description (src/core/opts_desc.c) gives the
command is listed by its --help and parsed (missing its value, it asks
for the value instead of calling the flag unknown; given one, a parser
reads it), and every option it
gives Python is a keyword of attn.scaled_dot_product_attention and of
attn.sdpa_backward.

usage: opts_desc_sides.py TEST_OPTS_DESC CLI LIBATTN_SO SOURCE_DIR"""
import inspect
import os
import subprocess
import sys


def main():
    lister, cli, lib, src = sys.argv[1:5]
    rows = subprocess.run([lister, "--list"], check=True, capture_output=True,
                          text=True).stdout.splitlines()
    rows = [r.split("\t") for r in rows]
    fails = []
    help_text = subprocess.run([cli, "sdpa", "--help"], capture_output=True,
                               text=True).stdout
    for name, flag, _ in rows:
        if not flag:
            continue
        if flag + " " not in help_text and flag + "\n" not in help_text:
            fails.append(f"attn sdpa --help does not list {flag} ({name})")
        p = subprocess.run([cli, "sdpa", "q.npy", "k.npy", "v.npy", flag],
                           capture_output=True, text=True)
        if "needs a value" not in p.stderr:
            fails.append(f"attn sdpa does not parse {flag} ({name}): "
                         f"{p.stderr.strip()!r}")
        p = subprocess.run([cli, "sdpa", "q.npy", "k.npy", "v.npy", flag, "1"],
                           capture_output=True, text=True)
        if "described but not parsed" in p.stderr:
            fails.append(f"attn sdpa has no parser for {flag} ({name})")
    os.environ["ATTN_LIBRARY"] = lib
    sys.path.insert(0, os.path.join(src, "python"))
    import attn
    for fn in (attn.scaled_dot_product_attention, attn.sdpa_backward):
        params = inspect.signature(fn).parameters
        for name, _, kw in rows:
            if kw and kw not in params:
                fails.append(f"attn.{fn.__name__} has no keyword {kw} ({name})")
    for f in fails:
        print("FAIL:", f)
    print("opts_desc_sides:", "FAILED" if fails else f"ok ({len(rows)} rows)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

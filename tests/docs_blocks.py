"""The fenced code blocks of README.md and docs/*.md, for the tests that
compile or run them (cli_readme.py, python/tests/test_docs.py,
model_numpy_check.py). Not a test itself (it does not match cli_*.py)."""
import glob
import os
import re

KINDS = ("c", "sh", "python", "text")


def pages(src):
    """README.md and every docs/*.md, as paths relative to src."""
    return ["README.md"] + sorted(
        os.path.relpath(p, src) for p in glob.glob(os.path.join(src, "docs", "*.md")))


def blocks(text):
    """[(heading, kind, code)] in page order; a fence inside a list item
    loses the item's indent. kind "" is a fence without a language."""
    out, heading, lines, i = [], "", text.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^#{1,6} (.*)$", line)
        if m:
            heading = m.group(1)
        m = re.match(r"^( *)```(\w*)$", line)
        if m:
            indent, kind, code, i = len(m.group(1)), m.group(2), [], i + 1
            while i < len(lines) and lines[i].strip() != "```":
                code.append(lines[i][indent:])
                i += 1
            out.append((heading, kind, "\n".join(code) + "\n"))
        i += 1
    return out


def indented_code(text):
    """Line numbers of code blocks written by indentation (4 spaces after a
    blank line, outside fences and list items): they must be fenced so that
    their language is known."""
    lines, found, fence, in_list = text.split("\n"), [], False, False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        if re.match(r"^\s*(- |\d+\. )", line):
            in_list = True
        elif line and not line.startswith(" "):
            in_list = False
        base = 6 if in_list else 4
        if i and not lines[i - 1].strip() and line.startswith(" " * base) and line.strip():
            found.append(i + 1)
    return found


def page_blocks(src, page, kind):
    text = open(os.path.join(src, page), encoding="utf-8").read()
    return [(h, code) for h, k, code in blocks(text) if k == kind]

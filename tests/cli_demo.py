"""attn demo --out DIR: the gallery. Every file that index.html links to
exists and is a real picture or page, every section of the issue is there
(drawn or with a line saying why not), the summary names the directory,
and the whole run takes well under two minutes.

usage: cli_demo.py PATH/TO/attn SOURCE_DIR
"""
import os
import re
import sys
import tempfile
import time

from clitest import check, run, summary



with tempfile.TemporaryDirectory() as d:
    out = os.path.join(d, "gallery")
    t0 = time.time()
    p = run(["demo", "--out", out])
    took = time.time() - t0
    check(p.returncode == 0, "demo exit status %d: %s" % (p.returncode, p.stderr))
    check(took < 120, "demo took %.1f s" % took)
    check(("open %s/index.html" % out) in p.stdout, "summary names the gallery")
    # the printed tutorial results are still there
    check("output shape: (64, 5, 64)" in p.stdout, "the (64, 5, 64) run")
    check("0.471083" in p.stdout, "the 3-token weights")
    index = os.path.join(out, "index.html")
    check(os.path.exists(index), "index.html")
    html = open(index, encoding="utf-8").read() if os.path.exists(index) else ""
    links = set(re.findall(r'(?:href|src)="([^"]+)"', html))
    check(len(links) >= 12, "index links %d files" % len(links))
    for link in sorted(links):
        f = os.path.join(out, link)
        ok = os.path.isfile(f) and os.path.getsize(f) > 200
        check(ok, "linked file %s exists" % link)
        if not ok:
            continue
        head = open(f, "rb").read(16)
        if link.endswith(".png"):
            check(head.startswith(b"\x89PNG"), link + " is a PNG")
        elif link.endswith(".svg"):
            check(b"<svg" in open(f, "rb").read(400), link + " is an SVG")
        elif link.endswith(".html"):
            check(head.startswith(b"<!DOCTYPE html>"), link + " is a page")
        else:
            check(False, "unexpected link " + link)
    # every experiment of the issue has its section, drawn or explained
    for n in range(1, 11):
        check(("<h2>%d. " % n) in html, "section %d in the gallery" % n)
    # a part left out says which issue it waits for
    for note in re.findall(r'<p class="note">([^<]*)</p>', html):
        if note.startswith("Left out"):
            check(re.search(r"issue \(?\d\)?.*has not landed", note) is not None,
                  "note says why: " + note)
    # nothing external
    check("http://" not in html and "https://" not in html, "gallery is local")

sys.exit(summary("cli_demo"))

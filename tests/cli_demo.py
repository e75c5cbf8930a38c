"""attn demo --out DIR: the gallery. Every file that index.html links to
exists and is a real picture or page, all ten parts of the issue are there
with their pictures, table or measured figures (none left out now that
every issue has landed), the summary names the directory, and the whole
run takes well under two minutes.

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
    # under the sanitizers (3-10x slower) part 8 times less work: the same code
    sanitized = os.environ.get("ATTN_SANITIZED") is not None
    p = run(["demo", "--out", out] + (["--quick"] if sanitized else []))
    took = time.time() - t0
    check(p.returncode == 0, "demo exit status %d: %s" % (p.returncode, p.stderr))
    # the time is reported, not tested: targets are benchmark figures
    print("demo took %.1f s" % took)
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
    # every experiment of the issue has its section, in order, with what
    # it must show; nothing is left out any more
    parts = re.split(r'<h2 id="part(\d+)">', html)
    found = [int(n) for n in parts[1::2]]
    check(found == list(range(1, 12)), "parts 1..11 in order, found %s" % found)
    body = {int(n): parts[2 * i + 2] for i, n in enumerate(parts[1::2])}
    for n in range(1, 12):
        b = body.get(n, "")
        check(b.startswith("%d. " % n), "part %d heading" % n)
        check("left out" not in b.lower() and "not landed" not in b,
              "part %d is not left out" % n)
    pictures = {n: re.findall(r'<img src="([^"]+)"', body.get(n, ""))
                for n in range(1, 12)}
    for n in (1, 2, 3, 4, 5, 7, 9, 10, 11):
        check(len(pictures[n]) >= 1, "part %d has a picture" % n)
    check(len(pictures[6]) == 5, "part 6: five masks, found %d" % len(pictures[6]))
    check("05_heads_viewer.html" in body.get(5, ""), "part 5 links the viewer")
    # (2) the annotated 3-token map also as SVG; (4) both entropies
    check("02_three_tokens.svg" in body.get(2, ""), "part 2 SVG")
    check(re.search(r"entropy 0\.\d+.*against 0\.\d+", body.get(4, "")) is not None,
          "part 4 names both entropies")
    # (5) the multi-head layer, 8 heads of d_model 512
    check("attn_mha_forward" in body.get(5, "") and "d_model 512" in body.get(5, ""),
          "part 5 uses the multi-head layer")
    check(re.search(r"\(5\) multi-head attention layer .*weights \(1, 8, 10, 10\)",
                    p.stdout) is not None, "part 5 printed")
    # (8) the speed table: 6 rows per length, both lengths, ratios, the shape
    # and where the full-size table is
    b8 = body.get(8, "")
    rows = re.findall(r"<tr><td>([^<]*)</td><td>(\d+)</td>((?:<td>[^<]*</td>)*)</tr>", b8)
    check(len(rows) == 12, "part 8 table has 12 rows, found %d" % len(rows))
    check(sorted({int(r[1]) for r in rows}) == [100, 256], "part 8 lengths")
    for name, L, rest in rows:
        cells = re.findall(r"<td>([^<]*)</td>", rest)
        check(len(cells) == 4, "part 8 row %s %s has 6 cells" % (name, L))
        if len(cells) == 4:
            check(all(float(c) >= 0 for c in cells[:3]), "part 8 numbers " + name)
            if "additive" in name:
                check(re.fullmatch(r"\d+\.\d\dx, \d+\.\d\dx", cells[3]) is not None,
                      "part 8 ratio of " + name + ": " + cells[3])
    check(("B = 2" if sanitized else "B = 4") in b8 and
          "attn bench --layers" in b8 and "docs/layers.md" in b8,
          "part 8 states its shape and points to the full table")
    check(re.search(r"^\(8\) additive vs dot-product", p.stdout, re.M) is not None,
          "part 8 printed")
    # the index shows pictures at their drawn size (an SVG as large as its
    # PNG twin), captions with <code>, not literal backticks
    index = open(os.path.join(out, "index.html")).read()
    check("560px" not in index, "no 560 px cap on the pictures")
    text = re.sub(r"<[^>]*>", "", index)
    check("`" not in text, "no literal backticks in the gallery's text")
    widths = dict(re.findall(r'<img src="([^"]+)" width="(\d+)"', index))
    check(len(widths) >= 10 and widths.get("02_three_tokens.svg") ==
          widths.get("02_three_tokens.png"), "SVG and PNG twins shown alike: %r"
          % {k: v for k, v in widths.items() if k.startswith("02")})
    svg = open(os.path.join(out, "02_three_tokens.svg")).read(2000)
    check(re.search(r'<svg[^>]* width="\d+(px)?"', svg) is not None and
          'pt"' not in svg.split(">", 2)[1], "SVG sized in pixels")
    # one numbering each: terminal sections "== N.", gallery parts "(N)"
    heads = re.findall(r"^(?:== )?(\d+)\. ", p.stdout, re.M)
    check(heads == ["1", "2", "3"], "terminal sections 1-3 once each: %r" % heads)
    check(re.search(r"a (\d+) x \1 map of blocks of (\d+) x \2 positions", p.stdout)
          is not None, "part 9 says the map's size and its blocks' alike")
    # (9) both memory figures; (10) the trained model's accuracy
    check(re.search(r"grew by [\d.]+ MiB during the flash kernel and by [\d.]+ MiB",
                    body.get(9, "")) is not None, "part 9 memory figures")
    check(re.search(r"token accuracy [01]\.\d+", p.stdout) is not None,
          "part 10 printed its accuracy")
    # (11) the date model trained on the spot: its outputs and alignment
    b11 = body.get(11, "")
    check("11_date_alignment.png" in b11, "part 11 alignment picture")
    check("tue 3 march 2026" in b11 and "beam 4" in b11, "part 11 output table")
    check(re.search(r"^\(11\) date model .* exact match [01]\.\d+", p.stdout, re.M)
          is not None, "part 11 printed its exact match")
    # nothing external
    check("http://" not in html and "https://" not in html, "gallery is local")

sys.exit(summary("cli_demo"))

#!/usr/bin/env python3
"""Writes bpe_tables.c: the Unicode classes the byte-level BPE
pre-tokenizers' patterns need, from Python's unicodedata (run: python3
gen_bpe_tables.py > bpe_tables.c && clang-format -i bpe_tables.c; the
output is kept in git, nothing runs this at build time).

Classes by code point ranges, as the patterns' \\p{L}, \\p{N} and \\s read
them: letter (categories Lu Ll Lt Lm Lo), number (Nd Nl No), space (the
White_Space property), anything else. Surrogates are "other" (they never
reach the matcher: text that is not UTF-8 is cut byte by byte).

For the NFC normalizer (Qwen2's tokenizer.json has one): the canonical
combining classes (runs of nonzero classes), each character's full
canonical decomposition (NFD of the character alone; Hangul syllables
are left to arithmetic), and the primary composites (pairs that NFC
composes), found by asking unicodedata itself.
"""
import sys
import unicodedata as ud

from unicode_gen import WS, header, runs, write_runs

OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3


def cls(cp):
    if cp in WS:
        return SPACE
    cat = ud.category(chr(cp))
    if cat[0] == "L":
        return LETTER
    if cat[0] == "N":
        return NUMBER
    return OTHER


out = sys.stdout
header(out, "gen_bpe_tables.py", "bpe.h")
write_runs(out, "attn__bpe_run", "attn__bpe_runs", "attn__bpe_nruns", runs(cls))
write_runs(out, "attn__bpe_run", "attn__bpe_ccc", "attn__bpe_nccc",
           runs(lambda cp: ud.combining(chr(cp)), prev=0))

decomp, pool = [], []
comp = []
for cp in range(0x110000):
    if 0xD800 <= cp <= 0xDFFF or 0xAC00 <= cp <= 0xD7A3:
        continue
    d = ud.decomposition(chr(cp))
    if not d or d.startswith("<"):
        continue
    full = [ord(c) for c in ud.normalize("NFD", chr(cp))]
    assert len(full) <= 2 * len(chr(cp).encode("utf-8")), hex(cp)
    decomp.append((cp, len(pool), len(full)))
    pool += full
    one = [int(x, 16) for x in d.split()]
    if len(one) == 2 and ud.normalize("NFC", "".join(map(chr, one))) == chr(cp):
        comp.append((one[0], one[1], cp))
comp.sort()
out.write("const uint32_t attn__bpe_nfd_pool[] = {\n")
for i in range(0, len(pool), 8):
    out.write("    " + ", ".join("0x%X" % x for x in pool[i:i + 8]) + ",\n")
out.write("};\nconst attn__bpe_decomp attn__bpe_nfd[] = {\n")
for cp, off, n in decomp:
    out.write("    {0x%X, %d, %d},\n" % (cp, off, n))
out.write("};\nconst int attn__bpe_nnfd = %d;\n\n" % len(decomp))
out.write("const attn__bpe_pair3 attn__bpe_nfc[] = {\n")
for a, b, c in comp:
    out.write("    {0x%X, 0x%X, 0x%X},\n" % (a, b, c))
out.write("};\nconst int attn__bpe_nnfc = %d;\n" % len(comp))

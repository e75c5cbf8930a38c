#!/usr/bin/env python3
"""Writes wordpiece_tables.c: the Unicode facts BERT's basic tokenization
needs, from Python's unicodedata (run: python3 gen_wordpiece_tables.py >
wordpiece_tables.c; the output is kept in git, nothing runs this at build
time).

  - classes by code point ranges: removed (category C*: control, format,
    surrogate, private use, unassigned; and U+FFFD, except tab, newline,
    carriage return), whitespace (the White_Space property), punctuation
    (ASCII punctuation and categories P*), CJK ideograph (BERT's ranges);
  - the per-character map c -> lower(remove_Mn(NFD(c))) where it differs
    from c: accents stripped (NFD, nonspacing marks dropped), then
    lower-cased, as tokenizers' BertNormalizer does. A nonspacing mark on
    its own maps to the empty string. Hangul syllables (U+AC00..U+D7A3)
    are left out: their NFD is arithmetic (wordpiece.c).
"""
import sys
import unicodedata as ud

from unicode_gen import WS, header, runs, write_runs

CJK = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
       (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]
NONE, REMOVE, SPACE, PUNCT, CJKC = 0, 1, 2, 3, 4


def cls(cp):
    c = chr(cp)
    if cp in (9, 10, 13):
        return SPACE
    if cp == 0 or cp == 0xFFFD or ud.category(c).startswith("C"):
        return REMOVE
    if cp in WS:
        return SPACE
    if (33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126) \
            or ud.category(c).startswith("P"):
        return PUNCT
    if any(a <= cp <= b for a, b in CJK):
        return CJKC
    return NONE


maps = []
for cp in range(0x110000):
    if 0xD800 <= cp <= 0xDFFF or 0xAC00 <= cp <= 0xD7A3:
        continue  # surrogates; Hangul syllables are decomposed in code
    c = chr(cp)
    if cls(cp) == REMOVE:
        continue
    s = "".join(ch for ch in ud.normalize("NFD", c) if ud.category(ch) != "Mn")
    s = "".join(ch.lower() for ch in s)
    if s != c:
        maps.append((cp, s.encode("utf-8")))
assert all(len(b) <= 15 for _, b in maps)
out = sys.stdout
header(out, "gen_wordpiece_tables.py", "wordpiece.h")
write_runs(out, "attn__wp_run", "attn__wp_runs", "attn__wp_nruns", runs(cls))
out.write("const attn__wp_map attn__wp_maps[] = {\n")
for cp, b in maps:
    lit = "".join("\\x%02x" % x for x in b)
    out.write('    {0x%X, %d, "%s"},\n' % (cp, len(b), lit))
out.write("};\nconst int attn__wp_nmaps = %d;\n" % len(maps))

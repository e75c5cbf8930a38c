#!/usr/bin/env python3
"""Writes tests/data/wordpiece_minilm.txt: the reference tokenization of 200
texts (and 40 pairs) by Hugging Face tokenizers with all-MiniLM-L6-v2's
tokenizer.json, truncation and padding off. Run once by hand, in a venv with
`pip install tokenizers` (CI does not need it):

  python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
  /tmp/tokvenv/bin/python tests/gen_wordpiece_expected.py MODEL_DIR

Line format (tab-separated; in the texts, backslash, tab, newline and
carriage return are written \\\\, \\t, \\n, \\r; other control
bytes \\xNN):
  S <ids> <text>
  P <ids> <type ids> <text a> <text b>
"""
import os
import random
import sys

import tokenizers

HAND = [
    "The cat sat on the mat because it was tired",
    "Hello, world!", "hello world", "HELLO WORLD", "  leading and trailing  ",
    "", " ", "a", "I", "?", "...", "Don't stop believing.", "It's 3:45 p.m. on 2024-01-31.",
    "The price is $1,234.56 (about €1.100).", "Call +1 (555) 010-9999 now!!!",
    "e-mail: someone@example.com, url: https://example.org/a?b=c&d=e#f",
    "Café au lait, crème brûlée and piñata.", "Ångström, Øresund, Łódź, Škoda, Çağlar.",
    "naïve coöperation façade résumé", "İstanbul ıstakoz", "Straße, Fuß, weiß", "ΣΊΣΥΦΟΣ σοφός",
    "Москва — столица России.", "Ελληνικά: Καλημέρα!", "עברית שלום", "العربية مرحبا",
    "हिन्दी नमस्ते", "ไทย สวัสดี", "日本語のテキスト、東京タワー。", "中文句子：我爱北京天安门！",
    "한국어 문장입니다.", "混合 mixed 文本 text 123", "ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ！", "①②③ ⅠⅡⅢ ½ ¾ ²³",
    "emoji 😀👍🏽 ❤️ 🇫🇷", "tab\there", "new\nline", "carriage\rreturn", "zero\u200bwidth\u200djoiner",
    "soft\u00adhyphen", "nbsp\u00a0space", "control\x01\x02\x7fchars", "bell\x07 and escape\x1b[0m",
    "replacement \ufffd char", "combining e\u0301 a\u0308 n\u0303", "ﬁﬂ ligatures ﬀ", "℃ ℉ № ™ ©®",
    "unbelievably antidisestablishmentarianism", "supercalifragilisticexpialidocious", "x" * 101,
    "y" * 100, "pneumonoultramicroscopicsilicovolcanoconiosis" * 2, "#hashtag @mention ##pieces",
    "[CLS] [SEP] [MASK] [UNK] [PAD]", "<html><body>Hi</body></html>", "C++ and C# and F#; x->y",
    "3.14159 2.71828 1e-10 0x1F 0b1010", "1,000,000 10^6 5%", "«quotes» „low“ ‘single’ “double”",
    "em—dash en–dash ‐hyphen ‑nb", "ellipsis… bullet • middot ·", "a.b.c d_e_f g/h\\i",
    "tokenization of 'quoted' \"words\"", "Mr. Smith went to Washington D.C. in the U.S.A.",
    "rock'n'roll", "O'Neill's", "well-known state-of-the-art", "COVID-19 SARS-CoV-2",
    "iPhone 15 Pro Max", "GPT-4o and BERT-base-uncased", "München Zürich Genève",
    "Ærøskøbing", "Þórshöfn", "Dvořák Janáček", "São Paulo", "Nguyễn Tiếng Việt",
]
WORDS = ("the of and to in is was that for it with as his on be at by had are but from or have an "
         "they which one you were her all she there would their we him been has when who will more "
         "no if out so said what up its about into than them can only other new some could time "
         "these two may then do first any my now such like our over man me even most made after "
         "also did many before must through back years where much your way well down should because "
         "each just those people how too little state good very make world still own see men work "
         "long get here between both life being under never day same another know while last might "
         "us great old year off come since against go came right used take three").split()
EXTRA = ["café", "naïve", "über", "北京", "東京", "서울", "μ", "Σ", "ß", "—", "…", "42", "3.5",
         "1999", "$", "%", "!", "?", ",", ".", ";", ":", "(", ")", "\"", "'", "-", "😀", "ñ",
         "Ünïcödé", "x²", "A.I.", "e.g.", "don't", "can't", "U.S.", "n't", "\u0301", "\u200b", "\u00a0"]


def sentence(rng):
    n = rng.randint(1, 30)
    out = []
    for _ in range(n):
        w = rng.choice(EXTRA) if rng.random() < 0.25 else rng.choice(WORDS)
        if rng.random() < 0.15:
            w = w.capitalize()
        if rng.random() < 0.05:
            w = w.upper()
        out.append(w)
    sep = " " if rng.random() < 0.8 else rng.choice(["  ", "\t", " \n "])
    s = sep.join(out)
    if rng.random() < 0.6:
        s = s[:1].upper() + s[1:] + rng.choice([".", "!", "?", "...", ""])
    return s


def esc(s):
    s = s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return "".join("\\x%02x" % ord(c) if ord(c) < 0x20 or ord(c) == 0x7f else c for c in s)


def main():
    d = sys.argv[1]
    tok = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    rng = random.Random(16)
    texts = list(HAND)
    while len(texts) < 200:
        texts.append(sentence(rng))
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "data", "wordpiece_minilm.txt"), "w", encoding="utf-8") as f:
        f.write("# tokenizers %s, all-MiniLM-L6-v2 tokenizer.json; made by "
                "tests/gen_wordpiece_expected.py\n" % tokenizers.__version__)
        for t in texts:
            e = tok.encode(t)
            f.write("S\t%s\t%s\n" % (" ".join(map(str, e.ids)), esc(t)))
        for i in range(40):
            a, b = texts[rng.randrange(len(texts))], texts[rng.randrange(len(texts))]
            e = tok.encode(a, b)
            f.write("P\t%s\t%s\t%s\t%s\n" % (" ".join(map(str, e.ids)),
                                            " ".join(map(str, e.type_ids)), esc(a), esc(b)))


main()

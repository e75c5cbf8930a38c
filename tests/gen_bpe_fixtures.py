#!/usr/bin/env python3
"""Makes the byte-level BPE fixtures of tests/data/bpe/ with Hugging Face
tokenizers (pip install tokenizers; CI needs none of this):

  NAME.json      a small tokenizer trained here on the text below, in the
                 layout of a real model's tokenizer.json:
                   gpt2     ByteLevel (GPT-2's pattern), <|endoftext|>
                   gpt2p    the same with add_prefix_space, an added token
                            with lstrip / rstrip, and a non-special one
                   llama3   Split (Llama 3's pattern) + ByteLevel,
                            ignore_merges, a BOS added by TemplateProcessing,
                            merges written as pairs, a word in the vocabulary
                            that no merge makes
                   qwen2    NFC, then Split (Qwen2's pattern) + ByteLevel
                   smollm   Digits (one by one) + ByteLevel
  NAME.expected  what tokenizers computes on the test strings, one record a
                 line (text as hex of its UTF-8):
                   S hex           a test string
                   I ids           encode(s, add_special_tokens=False)
                   B ids           encode(s, add_special_tokens=True)
                   D hex           decode(I, skip_special_tokens=False)
                   R ids / T hex / K hex   random ids and their decode
                                   without / with skip_special_tokens

usage: python3 tests/gen_bpe_fixtures.py   (writes tests/data/bpe/)
"""
import json
import os
import random

from tokenizers import Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers
from tokenizers import processors, trainers
from tokenizers import AddedToken

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "bpe")

GPT2_RE = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|"
           r"\s+(?!\S)|\s+")
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
             r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

TEXT = """\
The quick brown fox jumps over the lazy dog. It's what we've done, isn't it?
They'll say I'd rather be there; you're right, and we'm not. DON'T SHOUT!
In 1969, 3 astronauts flew 384,400 km; the price was $25,000,000 (about 12%).
def encode(text: str) -> list[int]:\n    return [ord(c) for c in text]  # ok
    if (x >= 10 && y != 0) { z = x / y; }\r\n\tprintf("%d\\n", z);
Le cœur a ses raisons que la raison ne connaît point. Ça va? Où est-ce?
Über den Wolken muß die Freiheit wohl grenzenlos sein. Straße, Größe.
Быстрая коричневая лиса прыгает через ленивую собаку. Ёлка и ёж.
Η γρήγορη καφέ αλεπού πηδά πάνω από το τεμπέλικο σκυλί.
الثعلب البني السريع يقفز فوق الكلب الكسول ١٢٣ ٤٥٦
तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है। १२३
敏捷的棕色狐狸跳过了懒狗。我们今天去北京。東京は日本の首都です。
日本語のテキストとカタカナ、ひらがな。한국어 텍스트도 있습니다.
Emoji: 😀 😃 👍🏽 👨‍👩‍👧‍👦 ❤️ 🇫🇷 🎉🎉 — and symbols ©®™ ½ ² Ⅻ ∑ ∞ ≠ ≤.
Spaces   and\ttabs\t\tand\n\nnewlines\r\n  indented\u3000wide\u00a0nbsp.
"""


def corpus():
    random.seed(7)
    lines = TEXT.splitlines(keepends=True)
    out = []
    for _ in range(60):
        random.shuffle(lines)
        out.append("".join(lines))
    return out


SPECIAL = ["<|endoftext|>", "<|begin_of_text|>", "<|im_start|>", "<|im_end|>"]


def train(kind):
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama3")))
    if kind in ("gpt2", "gpt2p"):
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(
            add_prefix_space=(kind == "gpt2p"), use_regex=True)
    elif kind == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    else:
        pat = LLAMA3_RE if kind == "llama3" else QWEN2_RE
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if kind == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=900, min_frequency=2, show_progress=False,
        special_tokens=SPECIAL if kind != "gpt2p" else SPECIAL[:1],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer=trainer)
    if kind == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A",
                pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                special_tokens=[("<|begin_of_text|>", bos)])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    if kind == "gpt2p":
        tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True)])
        tok.add_tokens([AddedToken("[[added]]", lstrip=False, rstrip=False,
                                   normalized=False)])
    data = json.loads(tok.to_str())
    if kind == "llama3":
        # a word in the vocabulary that no merge makes: with ignore_merges
        # it is one token
        data["model"]["vocab"]["zzyzx"] = len(data["model"]["vocab"]) + 8
        data["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m
                                   for m in data["model"]["merges"]]
    else:
        data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                                   for m in data["model"]["merges"]]
    return Tokenizer.from_str(json.dumps(data, ensure_ascii=False))


PIECES = [
    "hello", "Hello", "HELLO", "world", " the", "quick", "fox", "naïve",
    "café", "e\u0301", "n\u0303o", "a\u0308\u0304", "Ελληνικά", "Русский",
    "עברית", "العربية", "हिन्दी", "ไทย", "中文", "日本語", "한국어", "ｆｕｌｌ",
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "\U0001F9D1\u200D\U0001F680",
    "0", "7", "42", "123", "2024", "12345678", "3.14159", "1,000", "١٢٣",
    "１２３", "²", "Ⅻ", "½", "-5", "+7", "#1",
    " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0",
    "\u3000", "\u2028", "\u0085", "\u001c", "\u000b", "\u200b", "\ufeff",
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ll",
    "'D", "'ſ", "’s", "''", "'x", "don't", "I'M", "we'VE", "it's",
    "!", "?", "...", ",", ".", "(", ")", "{}", "[]", "<>", "<<", "->", "==",
    "@", "$", "%", "&&", "||", "\\", "/", "_", "__init__", "~", "`", "^",
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>",
    "<|im_start", "<mask>", "[[added]]", "zzyzx", "<|", "|>",
]


def strings():
    rng = random.Random(11)
    out = list(PIECES)
    out += [
        "", "Hello, world!", "Hello world", "  leading spaces", "trailing   ",
        "The capital of France is", "What is 2+2?", "tabs\tin\tthe\ttext",
        "mixed \t \n whitespace \r\n\r\n end", "a  b   c    d",
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        "x<mask>y", "x <mask> y", "x  <mask>  y", "text[[added]]text",
        "<|endoftext|><|endoftext|>", "<|endoftext", "zzyzx zzyzx",
        "Numbers: 1 22 333 4444 55555 666666", "v1.2.3-rc4", "0x1F600",
        "I'd've thought they'LL", "USER'S GUIDE", "don’t", "rock 'n' roll",
        "\n\n\n", " \n", "\n ", "  \n  \n", "\t \t", "a\n\nb", "a\r\n\r\nb",
        "émigré façade coöperate", "ÅÄÖ åäö", "İstanbul ıi", "ß ẞ ǅ ǈ",
        "e\u0301e\u0301e\u0301", "\u0301\u0301", "Ǆ", "ﬁ ﬂ", "Ⅷ Ⅸ",
        # canonical equivalents: NFC composes, reorders marks, keeps
        # exclusions decomposed, composes Hangul jamo
        "A\u030a \u212b \u00c5", "\u1e9b\u0323", "q\u0307\u0323",
        "o\u031b\u0323 \u1ee3", "\u0915\u093c \u0958",
        "\u1112\u1161\u11ab \u1100\u1161", "\u0344 \u0f73",
        "\u2126 \u1f71 \u0387", "e\u0327\u0306 \u1e1d",
        "\u05d0\u05b7\u05bc", "\u0301e", "a\u0300\u0316\u0301",
        "Vi\u1ec7t Nam vie\u0302\u0323t", "\uac00\u11a8 \uac01",
        "o" + "\u0301\u0323\u0308\u0330\u0345\u031b" * 6 + "x",
    ]
    for _ in range(300):
        k = rng.randint(1, 8)
        parts = [rng.choice(PIECES) for _ in range(k)]
        sep = rng.choice(["", " ", "", "  ", "\n", ""])
        out.append(sep.join(parts))
    # duplicates are harmless; keep the order stable
    seen, uniq = set(), []
    for s in out:
        if s not in seen:
            seen.add(s)
            uniq.append(s)
    return uniq


def hexs(s):
    return s.encode("utf-8").hex() or "-"


def write(kind, tok):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, kind + ".json"), "w", encoding="utf-8") as f:
        f.write(tok.to_str())
    rng = random.Random(5)
    lines = []
    for s in strings():
        a = tok.encode(s, add_special_tokens=False).ids
        b = tok.encode(s, add_special_tokens=True).ids
        lines.append("S " + hexs(s))
        lines.append("I " + " ".join(map(str, a)))
        lines.append("B " + " ".join(map(str, b)))
        lines.append("D " + hexs(tok.decode(a, skip_special_tokens=False)))
    n = tok.get_vocab_size(with_added_tokens=True)
    for _ in range(100):
        ids = [rng.randrange(n) for _ in range(rng.randint(1, 6))]
        lines.append("R " + " ".join(map(str, ids)))
        lines.append("T " + hexs(tok.decode(ids, skip_special_tokens=False)))
        lines.append("K " + hexs(tok.decode(ids, skip_special_tokens=True)))
    with open(os.path.join(OUT, kind + ".expected"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    for kind in ["gpt2", "gpt2p", "llama3", "qwen2", "smollm"]:
        write(kind, train(kind))
        print("wrote", kind)


if __name__ == "__main__":
    main()

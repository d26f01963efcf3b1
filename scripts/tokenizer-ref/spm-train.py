#!/usr/bin/env python3
"""Trains the SentencePiece test tokenizers and writes them, converted
(spm-convert.py) and gzip-compressed, as testdata/tokenize/spm_*.tokenizer.json.gz.

The training text is ours: the corpus texts (testdata/tokenize/corpus.jsonl)
and a multilingual mix generated here from a fixed seed (pseudo-words in a
dozen scripts, composed and decomposed accents, full-width and compatibility
forms, digits, emoji), so no upstream vocabulary is involved. spm_train
(Debian's sentencepiece 0.1.97) runs with one thread, unshuffled input and a
fixed seed: two runs give the same pieces and scores (the .model files
differ only in the paths they record) and byte-identical tokenizer files.
Another sentencepiece version may train other models; the committed files
are the reference.

  spm-train.py [workdir]   (default: a temporary directory, removed after)
"""
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unicodedata

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.normpath(os.path.join(here, "..", ".."))
testdata = os.path.join(repo, "testdata", "tokenize")

# name -> spm_train flags beyond the common ones. The ids are T5's: <pad> 0,
# </s> 1, <unk> 2, no <s>.
MODELS = {
    "spm_unigram": ["--vocab_size=8000", "--character_coverage=0.9995"],
    # A lower coverage leaves the rarer characters to the byte pieces.
    "spm_unigram_bf": ["--vocab_size=3000", "--character_coverage=0.98", "--byte_fallback=true"],
    "spm_unigram_cf": ["--vocab_size=4000", "--character_coverage=0.99", "--normalization_rule_name=nfkc_cf"],
}
COMMON = ["--model_type=unigram", "--num_threads=1", "--random_seed=8",
          "--shuffle_input_sentence=false", "--input_sentence_size=0", "--pad_id=0", "--eos_id=1",
          "--unk_id=2", "--bos_id=-1", "--minloglevel=2"]


def syllables(onsets, nuclei, codas=("",)):
    return [o + n + c for o in onsets for n in nuclei for c in codas]


def mix(rnd, n):
    """n lines of generated multilingual text."""
    latin = syllables(list("bcdfghjklmnprstvwz") + ["ch", "sh", "th", "qu", "st", "tr", ""],
                      list("aeiou") + ["ai", "ou", "é", "è", "ü", "ö", "ä", "ñ", "ø", "å", "ç"], ["", "n", "r", "s", "t"])
    cyr = syllables(list("бвгдзклмнпрстфхчшщж"), list("аеиоуыэюяё"), ["", "н", "й", "т"])
    greek = syllables(list("βγδζθκλμνξπρστφχψ"), list("αεηιουωάέήίόύώ"), ["", "ς", "ν"])
    hangul = [chr(0xAC00 + (l * 21 + v) * 28 + t) for l in range(0, 19, 2) for v in range(0, 21, 3) for t in (0, 4, 8, 16)]
    cjk = [chr(0x4E00 + rnd.randrange(0x5000)) for _ in range(600)]
    hira = [chr(c) for c in range(0x3041, 0x3097)]
    kata = [chr(c) for c in range(0x30A1, 0x30FB)]
    half = [chr(c) for c in range(0xFF66, 0xFF9E)]
    arabic = [chr(c) for c in range(0x0627, 0x064B)]
    harakat = [chr(c) for c in range(0x064B, 0x0653)]
    deva_c = [chr(c) for c in range(0x0915, 0x0939)]
    deva_v = [chr(c) for c in range(0x093E, 0x094D)] + [""] * 4
    thai = [chr(c) for c in range(0x0E01, 0x0E2F)] + [chr(c) for c in range(0x0E30, 0x0E3A)]
    compat = ["ﬁ", "ﬂ", "ﬀ", "㎏", "㎞", "™", "①", "②", "⑩", "½", "¼", "²", "³", "ℌ", "ℕ", "Ⅻ", "ⅳ", "㈱", "㍻",
              "…", "‥", "′", "″", "µ", "Å", "Ω", "K", "ſ", "ǅ", "ĳ", "ŉ", "\u00a0", "\u2003", "\u3000", "\u200b",
              "\u00ad", "\ufeff", "\u2028"]
    emoji = ["🍕", "🎉", "👍", "👍🏽", "❤️", "✨", "🇰🇷", "👨‍👩‍👧", "😀", "🚀"]
    punct = list(".,;:!?-()[]\"'/") + ["。", "、", "！", "？", "«", "»", "“", "”", "‘", "’", "—", "–"]

    def latin_word():
        w = "".join(rnd.choice(latin) for _ in range(rnd.randint(1, 4)))
        if rnd.random() < 0.15:
            w = unicodedata.normalize("NFD", w)
        if rnd.random() < 0.1:
            w = w.capitalize()
        elif rnd.random() < 0.03:
            w = w.upper()
        elif rnd.random() < 0.03:
            w = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in w)  # full width
        return w

    words = {
        "latin": latin_word,
        "cyr": lambda: "".join(rnd.choice(cyr) for _ in range(rnd.randint(1, 4))),
        "greek": lambda: "".join(rnd.choice(greek) for _ in range(rnd.randint(1, 4))),
        "hangul": lambda: "".join(rnd.choice(hangul) for _ in range(rnd.randint(1, 5))),
        "cjk": lambda: "".join(rnd.choice(cjk) for _ in range(rnd.randint(1, 6))),
        "ja": lambda: "".join(rnd.choice(hira if rnd.random() < 0.6 else kata) for _ in range(rnd.randint(2, 7))),
        "half": lambda: "".join(rnd.choice(half) for _ in range(rnd.randint(2, 5))),
        "arabic": lambda: "".join(rnd.choice(arabic) + (rnd.choice(harakat) if rnd.random() < 0.2 else "")
                                  for _ in range(rnd.randint(2, 7))),
        "deva": lambda: "".join(rnd.choice(deva_c) + rnd.choice(deva_v) for _ in range(rnd.randint(1, 4))),
        "thai": lambda: "".join(rnd.choice(thai) for _ in range(rnd.randint(2, 8))),
        "num": lambda: rnd.choice([str(rnd.randint(0, 9999)), f"{rnd.random() * 100:.2f}", "١٢٣", "٤٥", "१२३"]),
        "compat": lambda: rnd.choice(compat),
        "emoji": lambda: rnd.choice(emoji),
    }
    kinds = list(words)
    weights = [30, 8, 5, 8, 8, 6, 1, 5, 5, 4, 6, 3, 2]
    spaced = {"latin", "cyr", "greek", "hangul", "arabic", "deva", "num", "compat", "emoji"}
    lines = []
    for _ in range(n):
        main = rnd.choices(kinds, weights)[0]
        out = []
        for _ in range(rnd.randint(3, 16)):
            k = main if rnd.random() < 0.75 else rnd.choices(kinds, weights)[0]
            if out and (k in spaced or rnd.random() < 0.3):
                out.append(" " * (1 if rnd.random() < 0.95 else rnd.randint(2, 4)))
            out.append(words[k]())
            if rnd.random() < 0.12:
                out.append(rnd.choice(punct))
        lines.append("".join(out))
    return lines


def main():
    work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="spm-train-")
    os.makedirs(work, exist_ok=True)
    rnd = random.Random(8)
    lines = []
    with open(os.path.join(testdata, "corpus.jsonl"), encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)["text"]
            # spm_train reads a line a sentence and skips overlong ones.
            lines.extend(t for t in text.replace("\r", "\n").split("\n") if t.strip() and len(t.encode()) < 4000)
    lines.extend(mix(rnd, 40000))
    text = os.path.join(work, "train.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    for name, flags in MODELS.items():
        prefix = os.path.join(work, name)
        subprocess.run(["spm_train", f"--input={text}", f"--model_prefix={prefix}"] + COMMON + flags,
                       check=True, stdout=subprocess.DEVNULL)
        out = os.path.join(work, f"{name}.tokenizer.json")
        subprocess.run([sys.executable, os.path.join(here, "spm-convert.py"), prefix + ".model", out], check=True)
        with open(out, "rb") as f:
            raw = f.read()
        with open(os.path.join(testdata, f"{name}.tokenizer.json.gz"), "wb") as f:
            f.write(gzip.compress(raw, compresslevel=9, mtime=0))
        print(f"{name}: {len(raw)} bytes", file=sys.stderr)
    if len(sys.argv) <= 1:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()

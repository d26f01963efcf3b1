#!/usr/bin/env python3
"""Writes testdata/tokenize/corpus.jsonl: the texts whose token ids the goldens pin.

Deterministic (fixed seed). One JSON object per line: {"name": ..., "text": ...}.
"""
import json, random, sys, os

rnd = random.Random(8)
cases = []
def add(name, text):
    cases.append({"name": name, "text": text})

add("empty", "")
add("space", " ")
add("ascii", "Hello, world! This is a test of the tokenizer.")
add("leading-space", "  leading spaces and trailing   ")
add("contractions", "I'm sure you'll see they've said it's what we'd do. DON'T SHOUT, I'LL DO IT. 'S 'T 'Re 'vE")
add("long-s", "it'ſ odd 'ſ ſtrange")
add("numbers", "1 12 123 1234 12345 123456 3.14159 -42 1e10 0x1F ٣٤٥ ①②③ ½ Ⅻ")
add("korean", "안녕하세요, 세계! 한국어 토크나이저 테스트입니다. 띄어쓰기 없이도잘되나요?")
add("japanese", "こんにちは世界。カタカナとひらがなと漢字を混ぜる。ｈａｌｆｗｉｄｔｈ ｶﾀｶﾅ")
add("chinese", "你好，世界！这是一个测试。人工智能正在改变世界。")
add("arabic", "مرحبا بالعالم! هذا اختبار للمحلل. العربية مع تشكيل: مَرْحَبًا")
add("hindi", "नमस्ते दुनिया! यह एक परीक्षण है। क्षत्रिय ज्ञान")
add("thai", "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง")
add("russian", "Привет, мир! Это тест токенизатора. ЁЖИК ёжик")
add("greek", "Γειά σου Κόσμε! ΣΟΦΟΣ σοφός")
add("emoji", "I love 🍕 and 🎉! 👍🏽 🇰🇷 🇺🇸 ❤️ ✨")
add("zwj", "family 👨‍👩‍👧‍👦 tech 🧑🏿‍💻 flag 🏳️‍🌈 kiss 👩‍❤️‍💋‍👨")
add("tabs-newlines", "a\tb\t\tc\n\nd\n\n\n   e\r\nf\r\n\r\ng \n h\t\n\ti")
add("crlf", "line one\r\nline two\r\n\r\n  indented\r\n")
add("whitespace-runs", "x" + " " * 17 + "y" + "\t" * 5 + "z" + "\n" * 9 + "end" + " " * 4)
add("only-newlines", "\n\n\n\n")
add("unicode-spaces", "a\u00a0b\u2003c\u3000d\u200be\u2028f\u2029g\u0085h\u202fi\u1680j")
add("code-python", "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\nprint([fib(i) for i in range(10)])\n")
add("code-go", "func main() {\n\tfor i := 0; i < 10; i++ {\n\t\tfmt.Printf(\"%d\\n\", i)\n\t}\n}\n")
add("code-js", "const x = {a: 1, 'b': [2, 3], \"c\": null}; // comment\nx?.a ?? 0 === 1 && console.log(`t ${x}`);")
add("json", "{\"model\": \"qwen3\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 128}")
add("html", "<div class=\"a\"><p>Hello&nbsp;<b>world</b></p><br/></div>")
add("url-path", "https://example.com/path/to/file.html?q=1&r=two#frag /usr/local/bin//x")
add("punct-runs", "!!! ??? ... --- *** ___ ((())) [[[]]] {{{}}} ||| \\\\ /// ::: ;;; ,,, ''' \"\"\"")
add("mixed-case", "CamelCaseWord camelCase HTTPServer getHTTPResponseCode iPhone McDonald'S XMLHttpRequest")
add("accents", "café naïve résumé Zürich São Paulo Ærøskøbing façade")
add("decomposed", "cafe\u0301 nai\u0308ve A\u030a e\u0301\u0301 \u0301start")
add("compat", "ﬁ ﬂ ﬀ ㎏ ™ ① ｶ Ｆｕｌｌ ² ³ ¼ ℌ")
add("sentencepiece-marker", "▁already▁has▁markers ▁ ▁▁x")
add("byte-fallback", "rare chars: 𓀀 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꙮ 𐍈 ⿰ 𠀋 \u0001\u0002\u007f \ufeff bom")
add("invalid-looking", "\ufffd\ufffd replacement \uffff \U0010ffff \ue000 private")
add("math", "∀x∈ℝ: x² ≥ 0 ∧ ∑_{i=1}^{n} i = n(n+1)/2 ≈ ∞ ≠ ∅")
add("markdown", "# Title\n\n- item **bold** _it_ `code`\n\n```python\nprint('x')\n```\n\n| a | b |\n|---|---|\n")
add("repeated", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
add("repeated-words", "the the the the the the the the the the the the the the the the")
add("digits-long", "3141592653589793238462643383279502884197169399375105820974944592307816406286")
add("mixed-script-words", "abcабв123αβγ한국어abc日本語abcالعربية")
add("apostrophes", "rock'n'roll o'clock ' 's 'll' '' ''s ’s ‘quoted’ “double”")
# special-token strings inside text (each tokenizer recognises its own; others see plain text)
specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
            "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
            "<s>", "</s>", "<unk>", "[INST]", "<<SYS>>",
            "<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<|EOT|>", "<｜tool▁sep｜>",
            "<|start|>", "<|message|>", "<|channel|>", "<|end|>", "<|return|>",
            "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<unused3>", "<mask>", "[multimodal]"]
add("specials-chat", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>")
add("specials-llama3", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
add("specials-llama2", "<s>[INST] <<SYS>>\nBe nice.\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] again [/INST]")
add("specials-deepseek", "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>Hello<｜end▁of▁sentence｜><|EOT|>")
add("specials-harmony", "<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hey<|return|>")
add("specials-gemma", "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi<end_of_turn>\n<unused3> <mask>[multimodal]")
add("specials-adjacent", "".join(specials))
add("specials-spaced", " " + "  ".join(specials) + " ")
add("specials-words", "x<s>y a</s>b <unk>z word<|endoftext|>word <|im_end|>\n\n")
add("specials-partial", "<|im_start <|im_end| <s </s <｜User <start_of_turn <|endoftext|")
add("whitespace-before-special", "text   <|im_end|>   \n<s>  \t<eos>\n\n\n<end_of_turn>\t\t\t")

# random mixes
alphabet = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \t\n\r.,;:!?'\"()[]{}<>/\\|-_=+*&^%$#@~`") + \
    list("안녕하세요世界こんにちはمرحباनमस्तेПриветéàüßø🍕🎉👍🏽‍♀️\u00a0\u3000▁") + specials
for i in range(40):
    n = rnd.randint(1, 120)
    add(f"random-{i:02d}", "".join(rnd.choice(alphabet) for _ in range(n)))

words = ("the quick brown fox jumps over lazy dog 42 3.5 안녕 세계 日本 中文 مرحبا नमस्ते 🍕 "
         "func() {x} <|im_end|> <s> \n \t  don't I'LL").split(" ")
def long_text(n):
    return " ".join(rnd.choice(words) for _ in range(n))
add("long-mixed-4k", long_text(4000))
add("long-prose", ("Large language models are served by fleets of workers. The router keeps an index of "
                   "which worker holds which prefix blocks in its KV cache, and sends each request where "
                   "the overlap is largest. ") * 60)
add("long-code", ("for (int i = 0; i < n; ++i) {\n    sum += a[i] * b[i];\n}\n") * 200)
add("long-korean", ("한국어 문장은 공백으로 단어를 구분하지만 조사와 어미가 붙습니다. ") * 150)
add("long-whitespace", " " * 3000 + "x" + "\n" * 500 + "\t" * 300)
add("long-no-space", "a" * 2000 + "가" * 1000 + "1" * 1000)

# random strings over the characters the split patterns and normalizers tell apart
edge = ["a", "s", "t", "S", "T", "L", "d", "X", "'", "’", "'s", "'LL", "'ve", "0", "7", "١", "Ⅻ", "½", "²", "①",
        " ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u000b", "\u0085", "\u200b",
        ".", ",", "!", "/", "-", "_", "(", "`", "~", "@", "$", "+", "<", ">", "|", "€", "©", "\\",
        "\u0301", "\u0308", "ʰ", "ǅ", "ſ", "İ", "ﬁ", "가", "각", "中", "龥", "\u9fa6", "ひ", "カ", "ー", "ｶ", "é", "É", "ß", "Σ",
        "🍕", "👍🏽", "\u200d", "\u0001", "\u007f", "\ufffd", "▁", "▁▁", "\ue000", "𝔘", "𓀀",
        "<s>", "</s>", "<|im_end|>", "<|endoftext|>", "<｜User｜>", "<eos>", "<start_of_turn>", "\n\n\n", "\t\t"]
for i in range(300):
    n = rnd.randint(1, 40)
    add(f"fuzz-{i:03d}", "".join(rnd.choice(edge) for _ in range(n)))

# random code points from every plane (Unicode-version differences between
# Go's tables and the Rust core's show up here), and letters with random
# combining marks (canonical ordering and composition)
import unicodedata
def any_cp():
    while True:
        r = rnd.random()
        if r < 0.5: c = rnd.randint(0x20, 0x2FFF)
        elif r < 0.7: c = rnd.randint(0x3000, 0xFFFD)
        elif r < 0.8: c = rnd.randint(0x10000, 0x1FAFF)
        elif r < 0.85: c = rnd.randint(0x20000, 0x3134F)
        else: c = rnd.choice([0x20, 0x20, 0x0A, 0x09, 0x27, 0x73, 0x41, 0x31, 0x2E])
        if 0xD800 <= c <= 0xDFFF: continue
        return chr(c)
for i in range(300):
    add(f"unicode-{i:03d}", "".join(any_cp() for _ in range(rnd.randint(1, 30))))
marks = [chr(c) for c in range(0x300, 0x110000) if not 0xD800 <= c <= 0xDFFF and unicodedata.combining(chr(c))]
marks += [chr(c) for c in (0x0897, 0x08CA, 0x08CD, 0x0C3C, 0x0D3B, 0x0D3C, 0x1AC6, 0x1ABF, 0x1DFB, 0x10EFD, 0x11F41, 0x16FF0, 0x1E08F)]
for i in range(300):
    add(f"marks-{i:03d}", rnd.choice("aeiouxyzAOKn ") + "".join(rnd.choice(marks) for _ in range(rnd.randint(1, 4))) + rnd.choice(["", " ", "b", "\u0301"]))

out = os.path.join(os.path.dirname(__file__), "..", "..", "testdata", "tokenize", "corpus.jsonl")
with open(out, "w", encoding="utf-8") as f:
    for c in cases:
        f.write(json.dumps(c, ensure_ascii=False) + "\n")
print(f"{len(cases)} texts -> {os.path.normpath(out)}", file=sys.stderr)

package tokenize

import (
	"unicode"
	"unicode/utf8"
)

// Hand-written scanners for the split patterns of the common tokenizers.
// They find exactly the matches the library's regex engine (Oniguruma, a
// backtracking engine: the first alternative that matches at the leftmost
// position wins) finds, including the look-ahead in \s+(?!\S) that Go's
// regexp lacks, without backtracking. Patterns without a scanner fall back to
// a general backtracking engine. scan_test.go checks each scanner against
// that engine on random text.
const (
	// cl100kPattern is Llama 3's (and GPT-4's) split.
	cl100kPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// qwenPattern is Qwen2/2.5/3's: cl100k with single digits.
	qwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// o200kPattern is GPT-OSS's (GPT-4o's) split.
	o200kPattern = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
	// tekkenPattern is Mistral's Tekken split (Mistral Nemo, Small 3, Pixtral):
	// o200k's without the contractions and with single digits.
	tekkenPattern = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
	// DeepSeek V3 splits three times: digit groups, CJK runs, then words.
	digits3Pattern    = `\p{N}{1,3}`
	deepseekCJK       = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	deepseekWordsPatt = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
	// gpt2Pattern is the ByteLevel pre-tokenizer's own split (use_regex).
	gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// scanners maps each known pattern to its scanner.
var scanners = map[string]funcMatcher{
	cl100kPattern:     func(s string, i int) (int, int) { return i, scanCL100k(s, i, 3) },
	qwenPattern:       func(s string, i int) (int, int) { return i, scanCL100k(s, i, 1) },
	o200kPattern:      func(s string, i int) (int, int) { return i, scanO200k(s, i) },
	tekkenPattern:     func(s string, i int) (int, int) { return i, scanTekken(s, i) },
	digits3Pattern:    scanDigits3,
	deepseekCJK:       scanDeepseekCJK,
	deepseekWordsPatt: scanDeepseekWords,
	gpt2Pattern:       func(s string, i int) (int, int) { return i, scanGPT2(s, i) },
}

// knownScanner returns the scanner of pattern, or nil.
func knownScanner(pattern string) matcher {
	if f, ok := scanners[pattern]; ok {
		return f
	}
	return nil
}

// Character classes. The ASCII table makes the common case one load.
const (
	clL     = 1 << iota // \p{L}
	clN                 // \p{N}
	clSpace             // \s
	clP                 // \p{P}
	clS                 // \p{S}
	clUpper             // Lu
	clLower             // Ll
)

var asciiClass = func() (t [128]uint8) {
	for c := 0; c < 128; c++ {
		r := rune(c)
		var v uint8
		if unicode.IsLetter(r) {
			v |= clL
		}
		if unicode.IsNumber(r) {
			v |= clN
		}
		if unicode.IsSpace(r) {
			v |= clSpace
		}
		if unicode.IsPunct(r) {
			v |= clP
		}
		if unicode.IsSymbol(r) {
			v |= clS
		}
		if unicode.IsUpper(r) {
			v |= clUpper
		}
		if unicode.IsLower(r) {
			v |= clLower
		}
		t[c] = v
	}
	return t
}()

// The class tests follow the HF Rust core's regex engine, whose Unicode is
// newer than Go's: classdelta.go adds what Go's tables lack, and
// TestClassesMatchEngine checks every code point against the engine.

func isL(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r]&clL != 0
	}
	return unicode.IsLetter(r) || unicode.Is(onigExtraL, r)
}

func isN(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r]&clN != 0
	}
	return unicode.IsNumber(r) || unicode.Is(onigExtraN, r)
}

func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r]&clSpace != 0
	}
	return unicode.IsSpace(r)
}

func isPS(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r]&(clP|clS) != 0
	}
	return unicode.IsPunct(r) || unicode.IsSymbol(r) || unicode.Is(onigExtraP, r) || unicode.Is(onigExtraS, r)
}

func isM(r rune) bool {
	return r >= utf8.RuneSelf && (unicode.IsMark(r) || unicode.Is(onigExtraM, r))
}

func isLu(r rune) bool { return unicode.Is(unicode.Lu, r) || unicode.Is(onigExtraLu, r) }
func isLl(r rune) bool { return unicode.Is(unicode.Ll, r) || unicode.Is(onigExtraLl, r) }
func isLt(r rune) bool { return unicode.Is(unicode.Lt, r) || unicode.Is(onigExtraLt, r) }

// isUpperish is [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}].
func isUpperish(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r]&clUpper != 0
	}
	return isL(r) && !isLl(r) || isM(r)
}

// isLowerish is [\p{Ll}\p{Lm}\p{Lo}\p{M}].
func isLowerish(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r]&clLower != 0
	}
	return isL(r) && !isLu(r) && !isLt(r) || isM(r)
}

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClass[r]&(clL|clN|clSpace) == 0
	}
	return !isL(r) && !isN(r) && !unicode.IsSpace(r)
}

func decode(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) at s[i:] (s[i] is '\”)
// and returns its end, or -1. Under Unicode case folding ſ (U+017F) is an s.
func contraction(s string, i int, fold bool) int {
	j := i + 1
	if j >= len(s) {
		return -1
	}
	c, n := decode(s, j)
	lc := c
	if fold {
		lc = unicode.ToLower(c)
		if c == 'ſ' {
			lc = 's'
		}
	}
	switch lc {
	case 's', 't', 'm', 'd':
		return j + n
	case 'r', 'v', 'l':
		k := j + n
		if k >= len(s) {
			return -1
		}
		c2, n2 := decode(s, k)
		if fold {
			c2 = unicode.ToLower(c2)
		}
		if (lc == 'r' || lc == 'v') && c2 == 'e' || lc == 'l' && c2 == 'l' {
			return k + n2
		}
	}
	return -1
}

// spaceTail handles the whitespace alternatives shared by the GPT patterns,
// \s*[\r\n]+|\s+(?!\S)|\s+, at s[i:] where s[i] is whitespace; withNL says
// whether the first alternative is part of the pattern.
func spaceTail(s string, i int, withNL bool) int {
	j := i
	lastNL := -1
	count := 0
	lastStart := i
	for j < len(s) {
		c, n := decode(s, j)
		if !isSpace(c) {
			break
		}
		if c == '\r' || c == '\n' {
			lastNL = j + n
		}
		lastStart = j
		count++
		j += n
	}
	if withNL && lastNL > 0 {
		return lastNL
	}
	if j == len(s) || count == 1 {
		return j
	}
	return lastStart
}

// scanCL100k matches the cl100k (maxDigits 3) or Qwen (maxDigits 1) pattern
// at s[i:] and returns the end; every character starts a match.
func scanCL100k(s string, i int, maxDigits int) int {
	c, n := decode(s, i)
	if c == '\'' {
		if e := contraction(s, i, true); e > 0 {
			return e
		}
	}
	if isL(c) {
		return letterRun(s, i+n)
	}
	if c != '\r' && c != '\n' && !isN(c) && i+n < len(s) {
		if c2, n2 := decode(s, i+n); isL(c2) {
			return letterRun(s, i+n+n2)
		}
	}
	if isN(c) {
		j := i + n
		for k := 1; k < maxDigits && j < len(s); k++ {
			c2, n2 := decode(s, j)
			if !isN(c2) {
				break
			}
			j += n2
		}
		return j
	}
	if e := otherRun(s, i, c, n, false); e > 0 {
		return e
	}
	return spaceTail(s, i, true)
}

func letterRun(s string, j int) int {
	for j < len(s) {
		if c := s[j]; c < utf8.RuneSelf { // ASCII without a call
			if asciiClass[c]&clL == 0 {
				break
			}
			j++
			continue
		}
		c, n := utf8.DecodeRuneInString(s[j:])
		if !isL(c) {
			break
		}
		j += n
	}
	return j
}

// otherRun matches ` ?[^\s\p{L}\p{N}]+[\r\n]*` (with slash, [\r\n/]*) at
// s[i:], whose first character c has length n; -1 if it does not match.
func otherRun(s string, i int, c rune, n int, slash bool) int {
	j := i
	if c == ' ' {
		j = i + 1
		if j >= len(s) {
			return -1
		}
		c, n = decode(s, j)
	}
	if !isOther(c) {
		return -1
	}
	j += n
	for j < len(s) {
		c2, n2 := decode(s, j)
		if !isOther(c2) {
			break
		}
		j += n2
	}
	for j < len(s) && (s[j] == '\r' || s[j] == '\n' || slash && s[j] == '/') {
		j++
	}
	return j
}

// scanO200k matches the o200k pattern at s[i:] and returns the end.
func scanO200k(s string, i int) int { return scanCaseWords(s, i, true, 3) }

// scanTekken matches the Tekken pattern at s[i:] and returns the end.
func scanTekken(s string, i int) int { return scanCaseWords(s, i, false, 1) }

// scanCaseWords matches the case-aware word split o200k and Tekken share:
// the o200k pattern with its contractions when contractions is set, and at
// most maxDigits numbers to a piece.
func scanCaseWords(s string, i int, contractions bool, maxDigits int) int {
	tail := func(e int) int {
		if contractions {
			return o200kContraction(s, e)
		}
		return e
	}
	c, n := decode(s, i)
	prefix := c != '\r' && c != '\n' && !isL(c) && !isN(c) // [^\r\n\p{L}\p{N}]
	// [P]?[U]*[L]+(contraction)?
	if prefix {
		if e := o200kWord1(s, i+n); e > 0 {
			return tail(e)
		}
	}
	if e := o200kWord1(s, i); e > 0 {
		return tail(e)
	}
	// [P]?[U]+[L]*(contraction)?
	if prefix {
		if e := o200kWord2(s, i+n); e > 0 {
			return tail(e)
		}
	}
	if e := o200kWord2(s, i); e > 0 {
		return tail(e)
	}
	if isN(c) {
		j := i + n
		for k := 1; k < maxDigits && j < len(s); k++ {
			c2, n2 := decode(s, j)
			if !isN(c2) {
				break
			}
			j += n2
		}
		return j
	}
	if e := otherRun(s, i, c, n, true); e > 0 {
		return e
	}
	return spaceTail(s, i, true)
}

// o200kWord1 matches [U]*[L]+ at s[p:] (U upper-ish, L lower-ish; the two
// classes overlap), returning the end or -1, as a backtracking engine would.
func o200kWord1(s string, p int) int {
	j := p
	lastLower := -1 // end of the last lower-ish character inside the U run
	for j < len(s) {
		c, n := decode(s, j)
		if !isUpperish(c) {
			break
		}
		if isLowerish(c) {
			lastLower = j + n
		}
		j += n
	}
	if j < len(s) {
		if c, n := decode(s, j); isLowerish(c) {
			j += n
			for j < len(s) {
				c2, n2 := decode(s, j)
				if !isLowerish(c2) {
					break
				}
				j += n2
			}
			return j
		}
	}
	return lastLower
}

// o200kWord2 matches [U]+[L]* at s[p:].
func o200kWord2(s string, p int) int {
	j := p
	for j < len(s) {
		c, n := decode(s, j)
		if !isUpperish(c) {
			break
		}
		j += n
	}
	if j == p {
		return -1
	}
	for j < len(s) {
		c, n := decode(s, j)
		if !isLowerish(c) {
			break
		}
		j += n
	}
	return j
}

func o200kContraction(s string, e int) int {
	if e < len(s) && s[e] == '\'' {
		if e2 := contraction(s, e, true); e2 > 0 {
			return e2
		}
	}
	return e
}

// scanGPT2 matches the GPT-2 pattern at s[i:] and returns the end.
func scanGPT2(s string, i int) int {
	c, n := decode(s, i)
	if c == '\'' {
		if e := contraction(s, i, false); e > 0 {
			return e
		}
	}
	j, cj, nj := i, c, n
	if c == ' ' && i+1 < len(s) {
		j = i + 1
		cj, nj = decode(s, j)
	}
	for _, class := range [...]func(rune) bool{isL, isN, isOther} {
		if class(cj) {
			return classRun(s, j+nj, class)
		}
		if j != i && class(c) { // without the optional space (c is ' ', never in a class but isOther's)
			return classRun(s, i+n, class)
		}
	}
	return spaceTail(s, i, false)
}

func classRun(s string, j int, class func(rune) bool) int {
	for j < len(s) {
		c, n := decode(s, j)
		if !class(c) {
			break
		}
		j += n
	}
	return j
}

// scanDigits3 finds the next \p{N}{1,3}.
func scanDigits3(s string, i int) (int, int) {
	for i < len(s) {
		c, n := decode(s, i)
		if !isN(c) {
			i += n
			continue
		}
		j := i + n
		for k := 1; k < 3 && j < len(s); k++ {
			c2, n2 := decode(s, j)
			if !isN(c2) {
				break
			}
			j += n2
		}
		return i, j
	}
	return -1, -1
}

func isDeepseekCJK(r rune) bool {
	return r >= 0x4e00 && r <= 0x9fa5 || r >= 0x3040 && r <= 0x309f || r >= 0x30a0 && r <= 0x30ff
}

// scanDeepseekCJK finds the next run of DeepSeek's CJK ranges.
func scanDeepseekCJK(s string, i int) (int, int) {
	for i < len(s) {
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		c, n := decode(s, i)
		if !isDeepseekCJK(c) {
			i += n
			continue
		}
		j := i + n
		for j < len(s) {
			c2, n2 := decode(s, j)
			if !isDeepseekCJK(c2) {
				break
			}
			j += n2
		}
		return i, j
	}
	return -1, -1
}

func isASCIIPunct(c rune) bool {
	return c < utf8.RuneSelf && (c >= '!' && c <= '/' || c >= ':' && c <= '@' || c >= '[' && c <= '`' || c >= '{' && c <= '~')
}

func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

func isLM(r rune) bool { return isL(r) || isM(r) }

// scanDeepseekWords finds the next match of DeepSeek's word pattern; unlike
// the others it leaves some characters (digits, controls) unmatched.
func scanDeepseekWords(s string, i int) (int, int) {
	for i < len(s) {
		if e := deepseekWordAt(s, i); e > 0 {
			return i, e
		}
		_, n := decode(s, i)
		i += n
	}
	return -1, -1
}

func deepseekWordAt(s string, i int) int {
	c, n := decode(s, i)
	// [ASCII punctuation][A-Za-z]+
	if isASCIIPunct(c) && i+1 < len(s) && isASCIILetter(s[i+1]) {
		j := i + 2
		for j < len(s) && isASCIILetter(s[j]) {
			j++
		}
		return j
	}
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
	if c != '\r' && c != '\n' && !isL(c) && !isPS(c) && i+n < len(s) {
		if c2, n2 := decode(s, i+n); isLM(c2) {
			return classRun(s, i+n+n2, isLM)
		}
	}
	if isLM(c) {
		return classRun(s, i+n, isLM)
	}
	// ?[\p{P}\p{S}]+[\r\n]*
	j, cj, nj := i, c, n
	if c == ' ' && i+1 < len(s) {
		j = i + 1
		cj, nj = decode(s, j)
	}
	if isPS(cj) {
		k := classRun(s, j+nj, isPS)
		for k < len(s) && (s[k] == '\r' || s[k] == '\n') {
			k++
		}
		return k
	}
	if isSpace(c) {
		return spaceTail(s, i, true)
	}
	return -1
}

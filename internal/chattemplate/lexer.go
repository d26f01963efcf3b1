package chattemplate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// tokKind is the kind of a lexer token.
type tokKind uint8

const (
	tkData tokKind = iota
	tkVarBegin
	tkVarEnd
	tkBlockBegin
	tkBlockEnd
	tkName
	tkString
	tkInt
	tkFloat
	tkOp
	tkEOF
)

type token struct {
	kind tokKind
	val  string // name, operator, unescaped string, number text, data
	line int
}

func (t token) String() string {
	switch t.kind {
	case tkEOF:
		return "end of template"
	case tkVarEnd:
		return "'}}'"
	case tkBlockEnd:
		return "'%}'"
	case tkString:
		return fmt.Sprintf("string %q", t.val)
	}
	return fmt.Sprintf("%q", t.val)
}

// maxTemplateSize bounds the template source.
const maxTemplateSize = 1 << 20

// pyIsSpace reports whether r is whitespace for Python's str.isspace and the
// \s class of Python's re module on str patterns.
func pyIsSpace(r rune) bool {
	switch {
	case r >= '\t' && r <= '\r', r >= 0x1c && r <= 0x20, r == 0x85, r == 0xa0, r == 0x1680,
		r >= 0x2000 && r <= 0x200a, r == 0x2028, r == 0x2029, r == 0x202f, r == 0x205f, r == 0x3000:
		return true
	}
	return false
}

func pyRStrip(s string) string {
	for len(s) > 0 {
		r, n := utf8.DecodeLastRuneInString(s)
		if !pyIsSpace(r) {
			break
		}
		s = s[:len(s)-n]
	}
	return s
}

func pyLStripLen(s string) int {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !pyIsSpace(r) {
			break
		}
		i += n
	}
	return i
}

// normalizeSource applies Jinja's newline rules: \r\n and \r become \n and
// one trailing newline is dropped (keep_trailing_newline=False). minijinja
// keeps \r as it is and drops a trailing \n, then a \r before it.
func normalizeSource(src string, minijinja bool) string {
	if minijinja {
		src = strings.TrimSuffix(src, "\n")
		return strings.TrimSuffix(src, "\r")
	}
	if strings.ContainsRune(src, '\r') {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

type lexer struct {
	src  string
	pos  int
	line int
	toks []token
	// minijinja: string literals take minijinja's escapes
	// (WithDynamoFrontend), not Python's.
	minijinja bool
}

func (lx *lexer) errorf(format string, args ...any) error {
	return fmt.Errorf("line %d: %s", lx.line, fmt.Sprintf(format, args...))
}

func (lx *lexer) emit(k tokKind, v string) {
	lx.toks = append(lx.toks, token{kind: k, val: v, line: lx.line})
}

func (lx *lexer) advance(n int) {
	lx.line += strings.Count(lx.src[lx.pos:lx.pos+n], "\n")
	lx.pos += n
}

// lex turns a normalized source into tokens with Jinja's whitespace rules as
// transformers configures them (trim_blocks and lstrip_blocks on).
func lex(src string, minijinja bool) ([]token, error) {
	lx := &lexer{src: src, line: 1, minijinja: minijinja}
	for {
		// Find the next tag start.
		start := -1
		kind := byte(0)
		for i := lx.pos; i+1 < len(src); i++ {
			if src[i] == '{' {
				if c := src[i+1]; c == '{' || c == '%' || c == '#' {
					start, kind = i, c
					break
				}
			}
		}
		if start < 0 {
			if lx.pos < len(src) {
				lx.emit(tkData, src[lx.pos:])
			}
			lx.emit(tkEOF, "")
			return lx.toks, nil
		}
		text := src[lx.pos:start]
		sign := byte(0)
		if start+2 < len(src) && (src[start+2] == '-' || src[start+2] == '+') {
			sign = src[start+2]
		}
		switch {
		case sign == '-':
			text = pyRStrip(text)
		case sign != '+' && kind != '{':
			lpos := strings.LastIndexByte(text, '\n') + 1
			lineStarting := lx.pos == 0 || src[lx.pos-1] == '\n'
			if lpos > 0 || lineStarting {
				rest := text[lpos:]
				if rest != "" && pyLStripLen(rest) == len(rest) {
					text = text[:lpos]
				}
			}
		}
		if text != "" {
			lx.toks = append(lx.toks, token{kind: tkData, val: text, line: lx.line})
		}
		lx.advance(start - lx.pos)
		open := 2
		if sign != 0 {
			open = 3
		}
		switch kind {
		case '#':
			if err := lx.comment(open); err != nil {
				return nil, err
			}
		case '{':
			lx.advance(open)
			lx.emit(tkVarBegin, "")
			if err := lx.inside('}'); err != nil {
				return nil, err
			}
		case '%':
			if lx.isRaw(open) {
				if err := lx.raw(); err != nil {
					return nil, err
				}
				continue
			}
			lx.advance(open)
			lx.emit(tkBlockBegin, "")
			if err := lx.inside('%'); err != nil {
				return nil, err
			}
		}
	}
}

// endTag consumes the closing delimiter "<c>}" at lx.pos (with an optional
// leading - or +) and the whitespace the rules say it eats. ok is false when
// no delimiter is there.
func (lx *lexer) endTag(c byte) bool {
	s := lx.src[lx.pos:]
	sign := byte(0)
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		sign = s[0]
		s = s[1:]
	}
	if len(s) < 2 || s[0] != c || s[1] != '}' {
		return false
	}
	if sign == '+' && c == '}' && !lx.minijinja {
		// "+}}" is not a variable end for Jinja2 (the + is an operator);
		// minijinja's lexer takes it as one, the + changing nothing.
		return false
	}
	n := 2
	if sign != 0 {
		n = 3
	}
	lx.advance(n)
	switch {
	case sign == '-':
		lx.advance(pyLStripLen(lx.src[lx.pos:]))
	case sign == 0 && c != '}':
		lx.trimBlock()
	}
	return true
}

// trimBlock drops the line break after a block or comment tag
// (trim_blocks): a \n, or for minijinja a \r, a \n or both.
func (lx *lexer) trimBlock() {
	if lx.minijinja && lx.pos < len(lx.src) && lx.src[lx.pos] == '\r' {
		lx.advance(1)
	}
	if lx.pos < len(lx.src) && lx.src[lx.pos] == '\n' {
		lx.advance(1)
	}
}

func (lx *lexer) comment(open int) error {
	startLine := lx.line
	lx.advance(open)
	for {
		i := strings.Index(lx.src[lx.pos:], "#}")
		if i < 0 {
			lx.line = startLine
			return lx.errorf("missing end of comment tag")
		}
		j := lx.pos + i
		if j > lx.pos && (lx.src[j-1] == '-' || lx.src[j-1] == '+') {
			lx.advance(j - 1 - lx.pos)
		} else {
			lx.advance(j - lx.pos)
		}
		if lx.endTag('#') {
			return nil
		}
		lx.advance(1)
	}
}

func (lx *lexer) isRaw(open int) bool {
	s := lx.src[lx.pos+open:]
	s = s[pyLStripLen(s):]
	if !strings.HasPrefix(s, "raw") {
		return false
	}
	s = s[3:]
	s = s[pyLStripLen(s):]
	// Jinja's raw rule takes "%}" or "-%}" only; "+%}" makes it an
	// ordinary (unknown) tag. minijinja takes "+%}" as well.
	return strings.HasPrefix(s, "%}") || strings.HasPrefix(s, "-%}") ||
		lx.minijinja && strings.HasPrefix(s, "+%}")
}

func (lx *lexer) raw() error {
	// consume "{% raw %}": no trim_blocks here, "-%}" strips what follows
	i := strings.Index(lx.src[lx.pos:], "%}")
	j := lx.pos + i
	minus, plus := lx.src[j-1] == '-', lx.src[j-1] == '+'
	lx.advance(j + 2 - lx.pos)
	switch {
	case minus:
		lx.advance(pyLStripLen(lx.src[lx.pos:]))
	case lx.minijinja && !plus:
		// minijinja's trim_blocks applies to the raw tag too, unless
		// "+%}" turns it off.
		lx.trimBlock()
	}
	for k := lx.pos; ; {
		i := strings.Index(lx.src[k:], "{%")
		if i < 0 {
			return lx.errorf("missing end of raw directive")
		}
		k += i
		s := lx.src[k+2:]
		sign := byte(0)
		if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
			sign = s[0]
			s = s[1:]
		}
		s2 := s[pyLStripLen(s):]
		if !strings.HasPrefix(s2, "endraw") {
			k += 2
			continue
		}
		s3 := s2[6:]
		s3 = s3[pyLStripLen(s3):]
		if !strings.HasPrefix(s3, "%}") && !strings.HasPrefix(s3, "-%}") && !strings.HasPrefix(s3, "+%}") {
			k += 2
			continue
		}
		text := lx.src[lx.pos:k]
		switch {
		case sign == '-':
			text = pyRStrip(text)
		case sign != '+':
			lpos := strings.LastIndexByte(text, '\n') + 1
			rest := text[lpos:]
			if (lpos > 0 || lx.pos == 0 || lx.src[lx.pos-1] == '\n') && rest != "" && pyLStripLen(rest) == len(rest) {
				text = text[:lpos]
			}
		}
		if text != "" {
			lx.emit(tkData, text)
		}
		end := len(lx.src) - len(s3)
		lx.advance(end - lx.pos)
		lx.endTag('%')
		return nil
	}
}

var twoOps = []string{"==", "!=", "<=", ">=", "//", "**"}

// inside lexes expression tokens up to the closing "<c>}".
func (lx *lexer) inside(c byte) error {
	depth := 0
	for {
		lx.advance(pyLStripLen(lx.src[lx.pos:]))
		if lx.pos >= len(lx.src) {
			return lx.errorf("unexpected end of template, expected end of tag")
		}
		if depth == 0 && lx.endTag(c) {
			if c == '}' {
				lx.emit(tkVarEnd, "")
			} else {
				lx.emit(tkBlockEnd, "")
			}
			return nil
		}
		s := lx.src[lx.pos:]
		ch := s[0]
		switch {
		case ch == '_' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z':
			n := 1
			for n < len(s) && (s[n] == '_' || s[n] >= 'a' && s[n] <= 'z' || s[n] >= 'A' && s[n] <= 'Z' || s[n] >= '0' && s[n] <= '9') {
				n++
			}
			lx.emit(tkName, s[:n])
			lx.advance(n)
		case ch >= '0' && ch <= '9':
			if err := lx.number(s); err != nil {
				return err
			}
		case ch == '"' || ch == '\'':
			if err := lx.str(s); err != nil {
				return err
			}
		default:
			op := ""
			for _, o := range twoOps {
				if strings.HasPrefix(s, o) {
					op = o
					break
				}
			}
			if op == "" {
				if !strings.ContainsRune("+-*/%~()[]{}.,:|=<>!", rune(ch)) || ch == '!' {
					r, _ := utf8.DecodeRuneInString(s)
					return lx.errorf("unexpected char %q", r)
				}
				op = s[:1]
			}
			switch op {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				if depth == 0 {
					return lx.errorf("unexpected %q", op)
				}
				depth--
			}
			lx.emit(tkOp, op)
			lx.advance(len(op))
		}
	}
}

func (lx *lexer) number(s string) error {
	// 0x, 0o and 0b integers (any case, with underscores between digits),
	// as jinja lexes them; the parser gets them in decimal.
	if len(s) > 2 && s[0] == '0' && strings.ContainsRune("xXoObB", rune(s[1])) {
		n := 2
		for n < len(s) && (s[n] >= '0' && s[n] <= '9' || s[n] >= 'a' && s[n] <= 'z' || s[n] >= 'A' && s[n] <= 'Z' || s[n] == '_') {
			n++
		}
		// Not one ("0or x"): the 0 is a decimal integer, as jinja's
		// pattern would take it; too large is an error either way.
		if v, err := strconv.ParseInt(s[:n], 0, 64); err == nil {
			lx.emit(tkInt, strconv.FormatInt(v, 10))
			lx.advance(n)
			return nil
		} else if errors.Is(err, strconv.ErrRange) {
			return lx.errorf("integer %s out of range", s[:n])
		}
	}
	n := 0
	digits := func() {
		for n < len(s) && (s[n] >= '0' && s[n] <= '9' || s[n] == '_' && n+1 < len(s) && s[n+1] >= '0' && s[n+1] <= '9') {
			n++
		}
	}
	digits()
	isFloat := false
	// Right after a dot a number is an integer (jinja's float pattern
	// looks behind for one): x.0.1 is item 1 of item 0, not x[0.1].
	afterDot := lx.pos > 0 && lx.src[lx.pos-1] == '.'
	if !afterDot && n+1 < len(s) && s[n] == '.' && s[n+1] >= '0' && s[n+1] <= '9' {
		isFloat = true
		n++
		digits()
	}
	if !afterDot && n < len(s) && (s[n] == 'e' || s[n] == 'E') {
		m := n + 1
		if m < len(s) && (s[m] == '+' || s[m] == '-') {
			m++
		}
		if m < len(s) && s[m] >= '0' && s[m] <= '9' {
			isFloat = true
			n = m
			digits()
		}
	}
	text := strings.ReplaceAll(s[:n], "_", "")
	if isFloat {
		lx.emit(tkFloat, text)
	} else {
		lx.emit(tkInt, text)
	}
	lx.advance(n)
	return nil
}

// str lexes a quoted string with Python's escapes (minijinja's with
// lx.minijinja).
func (lx *lexer) str(s string) error {
	if lx.minijinja {
		return lx.mjStr(s)
	}
	q := s[0]
	var b strings.Builder
	i := 1
	for {
		if i >= len(s) {
			return lx.errorf("unterminated string")
		}
		ch := s[i]
		if ch == q {
			i++
			break
		}
		if ch != '\\' {
			b.WriteByte(ch)
			i++
			continue
		}
		if i+1 >= len(s) {
			return lx.errorf("unterminated string")
		}
		e := s[i+1]
		i += 2
		switch e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'a':
			b.WriteByte(7)
		case 'b':
			b.WriteByte(8)
		case 'f':
			b.WriteByte(12)
		case 'v':
			b.WriteByte(11)
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+n > len(s) {
				return lx.errorf("truncated \\%c escape", e)
			}
			var r rune
			for _, h := range []byte(s[i : i+n]) {
				d, ok := hexVal(h)
				if !ok {
					return lx.errorf("truncated \\%c escape", e)
				}
				r = r*16 + rune(d)
			}
			if r > utf8.MaxRune {
				return lx.errorf("illegal unicode character")
			}
			b.WriteRune(r)
			i += n
		case '0', '1', '2', '3', '4', '5', '6', '7':
			r := rune(e - '0')
			for k := 0; k < 2 && i < len(s) && s[i] >= '0' && s[i] <= '7'; k++ {
				r = r*8 + rune(s[i]-'0')
				i++
			}
			b.WriteRune(r)
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	lx.emit(tkString, b.String())
	lx.advance(i)
	return nil
}

func hexVal(h byte) (int, bool) {
	switch {
	case h >= '0' && h <= '9':
		return int(h - '0'), true
	case h >= 'a' && h <= 'f':
		return int(h-'a') + 10, true
	case h >= 'A' && h <= 'F':
		return int(h-'A') + 10, true
	}
	return 0, false
}

// mjStr lexes a quoted string as minijinja does: the literal runs to the
// next unescaped quote, and its escapes are minijinja's (mjUnescape).
func (lx *lexer) mjStr(s string) error {
	q := s[0]
	i := 1
	for ; i < len(s) && s[i] != q; i++ {
		if s[i] == '\\' {
			i++
		}
	}
	if i >= len(s) {
		return lx.errorf("unexpected end of string")
	}
	v, err := mjUnescape(s[1:i])
	if err != nil {
		return lx.errorf("%v", err)
	}
	lx.emit(tkString, v)
	lx.advance(i + 1)
	return nil
}

var errBadEscape = errors.New("bad string escape")

// mjUnescape decodes the escapes of a minijinja string literal: \" \\ \/
// \' \b \f \n \r \t as JSON has them, \uXXXX (UTF-16: a surrogate pair
// makes one character, a lone surrogate is an error), \xXX and one to
// three octal digits (a byte's value, as a character); any other escape,
// a backslash before a line break included, stays as it is written
// (Python would drop a backslash-newline and decode \a, \v, \U and \N).
func mjUnescape(s string) (string, error) {
	if !strings.Contains(s, "\\") {
		return s, nil
	}
	var b strings.Builder
	var pending rune // a surrogate waiting for its pair
	push := func(r rune) error {
		if pending != 0 {
			return errBadEscape
		}
		b.WriteRune(r)
		return nil
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		if r != '\\' {
			if err := push(r); err != nil {
				return "", err
			}
			continue
		}
		if i >= len(s) {
			return "", errBadEscape
		}
		d, n := utf8.DecodeRuneInString(s[i:])
		i += n
		var err error
		switch d {
		case '"', '\\', '/', '\'':
			err = push(d)
		case 'b':
			err = push('\b')
		case 'f':
			err = push('\f')
		case 'n':
			err = push('\n')
		case 'r':
			err = push('\r')
		case 't':
			err = push('\t')
		case 'u':
			var v uint64
			if v, i, err = mjRadix(s, i, 4, 16, 0xffff); err != nil {
				return "", err
			}
			c := rune(v)
			switch surrogate := c >= 0xd800 && c <= 0xdfff; {
			case !surrogate && pending == 0:
				b.WriteRune(c)
			case !surrogate:
				return "", errBadEscape
			case pending == 0:
				pending = c
			default:
				if pending > 0xdbff || c < 0xdc00 {
					return "", errBadEscape
				}
				b.WriteRune(utf16.DecodeRune(pending, c))
				pending = 0
			}
		case 'x':
			var v uint64
			if v, i, err = mjRadix(s, i, 2, 16, 0xff); err != nil {
				return "", err
			}
			err = push(rune(v))
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(s) && j < i+2 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			v, perr := strconv.ParseUint(s[i-1:j], 8, 8)
			if perr != nil {
				return "", errBadEscape
			}
			i = j
			err = push(rune(v))
		default:
			b.WriteByte('\\')
			err = push(d)
		}
		if err != nil {
			return "", err
		}
	}
	if pending != 0 {
		return "", errBadEscape
	}
	return b.String(), nil
}

// mjRadix reads the next n characters of s from i as a number in base
// (Rust's from_str_radix: an optional leading '+'), at most max.
func mjRadix(s string, i, n, base int, max uint64) (uint64, int, error) {
	start := i
	for k := 0; k < n; k++ {
		if i >= len(s) {
			return 0, i, errBadEscape
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	digits := strings.TrimPrefix(s[start:i], "+")
	if digits == "" || strings.HasPrefix(digits, "+") || strings.HasPrefix(digits, "-") {
		return 0, i, errBadEscape
	}
	v, err := strconv.ParseUint(digits, base, 64)
	if err != nil || v > max {
		return 0, i, errBadEscape
	}
	return v, i, nil
}

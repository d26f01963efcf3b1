package chattemplate

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// str.format as the sandbox runs it: Python's string.Formatter, whose
// fields read attributes and items through the environment (a missing one
// is undefined, not an error), and format() of each value with Python's
// format-spec mini-language.

// fmtState is the automatic field numbering of one str.format call: the
// next index, and whether a field was numbered by hand (the two do not
// mix).
type fmtState struct {
	next   int
	manual bool
}

// strFormat is Python's str.format.
func (r *renderer) strFormat(f string, args []any, kw *Dict) (any, error) {
	var b strings.Builder
	if err := r.vformat(&b, f, args, kw, &fmtState{}, 2); err != nil {
		return nil, err
	}
	return b.String(), nil
}

// vformat writes f with its fields replaced; depth bounds the fields
// nested in format specs, as Python's does.
func (r *renderer) vformat(b *strings.Builder, f string, args []any, kw *Dict, st *fmtState, depth int) error {
	if depth < 0 {
		return errors.New("max string recursion exceeded")
	}
	for i := 0; i < len(f); {
		c := f[i]
		if c != '{' && c != '}' {
			j := i + 1
			for j < len(f) && f[j] != '{' && f[j] != '}' {
				j++
			}
			b.WriteString(f[i:j])
			i = j
			continue
		}
		if i+1 < len(f) && f[i+1] == c {
			b.WriteByte(c)
			i += 2
			continue
		}
		if c == '}' {
			return errors.New("single '}' encountered in format string")
		}
		if i+1 >= len(f) {
			return errors.New("single '{' encountered in format string")
		}
		name, conv, spec, next, err := parseFormatField(f, i+1)
		if err != nil {
			return err
		}
		i = next
		v, err := r.formatFieldValue(name, args, kw, st)
		if err != nil {
			return err
		}
		switch conv {
		case 0:
		case 's':
			v = toStr(v)
		case 'r':
			v = toReprString(v)
		case 'a':
			v = asciiRepr(toReprString(v))
		default:
			return fmt.Errorf("unknown conversion specifier %c", conv)
		}
		if strings.ContainsRune(spec, '{') {
			var sb strings.Builder
			if err := r.vformat(&sb, spec, args, kw, st, depth-1); err != nil {
				return err
			}
			spec = sb.String()
		}
		s, err := pyFormat(v, spec)
		if err != nil {
			return err
		}
		b.WriteString(s)
		if err := r.chargeBytes(b.Len()); err != nil {
			return err
		}
	}
	return nil
}

// parseFormatField reads the field starting at f[i] (just past its "{"):
// the field name, the conversion (0 for none), the format spec, and the
// index just past the closing "}".
func parseFormatField(f string, i int) (name string, conv byte, spec string, next int, err error) {
	start := i
	c := byte(0)
	for i < len(f) {
		c = f[i]
		i++
		if c == '{' {
			return "", 0, "", 0, errors.New("unexpected '{' in field name")
		}
		if c == '[' {
			for i < len(f) && f[i] != ']' {
				i++
			}
			continue
		}
		if c == '}' || c == ':' || c == '!' {
			break
		}
	}
	if c != '}' && c != ':' && c != '!' {
		return "", 0, "", 0, errors.New("expected '}' before end of string")
	}
	name = f[start : i-1]
	if c == '}' {
		return name, 0, "", i, nil
	}
	if c == '!' {
		if i >= len(f) {
			return "", 0, "", 0, errors.New("end of string while looking for conversion specifier")
		}
		conv = f[i]
		i++
		if i < len(f) {
			c = f[i]
			i++
			if c == '}' {
				return name, conv, "", i, nil
			}
			if c != ':' {
				return "", 0, "", 0, errors.New("expected ':' after conversion specifier")
			}
		}
	}
	specStart, count := i, 1
	for i < len(f) {
		switch f[i] {
		case '{':
			count++
		case '}':
			count--
			if count == 0 {
				return name, conv, f[specStart:i], i + 1, nil
			}
		}
		i++
	}
	return "", 0, "", 0, errors.New("unmatched '{' in format spec")
}

// formatFieldValue resolves a field name: an index or a keyword (or the
// next index when empty), then .attribute and [key] parts.
func (r *renderer) formatFieldValue(name string, args []any, kw *Dict, st *fmtState) (any, error) {
	// As Python's string.Formatter: an empty name takes the next index,
	// an all-digit one is numbered by hand, and the two do not mix.
	switch {
	case name == "":
		if st.manual {
			return nil, errors.New("cannot switch from manual field specification to automatic field numbering")
		}
		name = strconv.Itoa(st.next)
		st.next++
	case isASCIIDigits(name):
		if st.next > 0 {
			return nil, errors.New("cannot switch from manual field specification to automatic field numbering")
		}
		st.manual = true
	}
	end := strings.IndexAny(name, ".[")
	if end < 0 {
		end = len(name)
	}
	first, rest := name[:end], name[end:]
	var v any
	if isASCIIDigits(first) {
		n, err := strconv.Atoi(first)
		if err != nil || n >= len(args) {
			return nil, errors.New("IndexError: tuple index out of range")
		}
		v = args[n]
	} else {
		val, ok := kw.Get(first)
		if !ok {
			return nil, fmt.Errorf("KeyError: %s", toReprString(first))
		}
		v = val
	}
	for rest != "" {
		var err error
		switch rest[0] {
		case '.':
			j := strings.IndexAny(rest[1:], ".[")
			if j < 0 {
				j = len(rest) - 1
			}
			attr := rest[1 : 1+j]
			if attr == "" {
				return nil, errors.New("empty attribute in format string")
			}
			if v, err = getAttr(v, attr); err != nil {
				return nil, err
			}
			rest = rest[1+j:]
		case '[':
			j := strings.IndexByte(rest, ']')
			if j < 0 {
				return nil, errors.New("missing ']' in format string")
			}
			var key any = rest[1:j]
			if key == "" {
				return nil, errors.New("empty attribute in format string")
			}
			if isASCIIDigits(rest[1:j]) {
				n, _ := strconv.ParseInt(rest[1:j], 10, 64)
				key = n
			}
			if v, err = getItem(v, key); err != nil {
				return nil, err
			}
			rest = rest[j+1:]
			if rest != "" && rest[0] != '.' && rest[0] != '[' {
				return nil, errors.New("only '.' or '[' may follow ']' in format field specifier")
			}
		default:
			return nil, errors.New("only '.' or '[' may follow ']' in format field specifier")
		}
	}
	return v, nil
}

// asciiRepr is Python's ascii(): repr with non-ASCII characters escaped.
func asciiRepr(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch {
		case c < 0x80:
			b.WriteRune(c)
		case c <= 0xFF:
			fmt.Fprintf(&b, "\\x%02x", c)
		case c <= 0xFFFF:
			fmt.Fprintf(&b, "\\u%04x", c)
		default:
			fmt.Fprintf(&b, "\\U%08x", c)
		}
	}
	return b.String()
}

// formatSpec is a parsed standard format spec:
// [[fill]align][sign][z][#][0][width][grouping][.precision][type].
type formatSpec struct {
	fill      rune
	align     byte // 0 when not given
	sign      byte // 0 when not given
	z         bool
	alt       bool
	zero      bool
	width     int
	grouping  byte // 0, ',' or '_'
	precision int  // -1 when not given
	typ       byte // 0 when not given
}

func parseFormatSpec(spec string) (formatSpec, error) {
	fs := formatSpec{fill: ' ', precision: -1}
	rs := []rune(spec)
	i := 0
	isAlign := func(c rune) bool { return c == '<' || c == '>' || c == '=' || c == '^' }
	switch {
	case len(rs) >= 2 && isAlign(rs[1]):
		fs.fill, fs.align, i = rs[0], byte(rs[1]), 2
	case len(rs) >= 1 && isAlign(rs[0]):
		fs.align, i = byte(rs[0]), 1
	}
	if i < len(rs) && (rs[i] == '+' || rs[i] == '-' || rs[i] == ' ') {
		fs.sign = byte(rs[i])
		i++
	}
	if i < len(rs) && rs[i] == 'z' {
		fs.z = true
		i++
	}
	if i < len(rs) && rs[i] == '#' {
		fs.alt = true
		i++
	}
	if i < len(rs) && rs[i] == '0' {
		fs.zero = true
		i++
	}
	digits := func() (int, bool, error) {
		j := i
		for i < len(rs) && rs[i] >= '0' && rs[i] <= '9' {
			i++
		}
		if i == j {
			return 0, false, nil
		}
		n, err := strconv.Atoi(string(rs[j:i]))
		if err != nil || n > maxOutputWidth {
			return 0, true, fmt.Errorf("%w: format width or precision over %d", ErrRenderUnavailable, maxOutputWidth)
		}
		return n, true, nil
	}
	var err error
	if fs.width, _, err = digits(); err != nil {
		return fs, err
	}
	if i < len(rs) && (rs[i] == ',' || rs[i] == '_') {
		fs.grouping = byte(rs[i])
		i++
	}
	if i < len(rs) && rs[i] == '.' {
		i++
		var ok bool
		if fs.precision, ok, err = digits(); err != nil {
			return fs, err
		}
		if !ok {
			return fs, errors.New("format specifier missing precision")
		}
	}
	if i < len(rs) {
		fs.typ = byte(rs[i])
		i++
		if rs[i-1] >= utf8.RuneSelf {
			fs.typ = '?'
		}
	}
	if i < len(rs) {
		return fs, errors.New("invalid format specifier")
	}
	return fs, nil
}

// zeroPad applies a zero before the width when no alignment is given:
// numbers are padded with zeros after their sign, strings with zeros on
// the right.
func (fs formatSpec) zeroPad(numeric bool) formatSpec {
	if fs.zero && fs.align == 0 {
		fs.fill = '0'
		if numeric {
			fs.align = '='
		}
	}
	return fs
}

// pyFormat is Python's format(value, spec) for the values templates hold.
func pyFormat(v any, spec string) (string, error) {
	switch x := v.(type) {
	case string:
		if spec == "" {
			return x, nil
		}
		fs, err := parseFormatSpec(spec)
		if err != nil {
			return "", err
		}
		return formatString(x, fs.zeroPad(false))
	case bool:
		if spec == "" {
			return toStr(x), nil
		}
		i, _ := intOf(x)
		return pyFormat(i, spec)
	case int64:
		if spec == "" {
			return toStr(x), nil
		}
		fs, err := parseFormatSpec(spec)
		if err != nil {
			return "", err
		}
		return formatInt(x, fs.zeroPad(true))
	case float64:
		if spec == "" {
			return toStr(x), nil
		}
		fs, err := parseFormatSpec(spec)
		if err != nil {
			return "", err
		}
		return formatFloatSpec(x, fs.zeroPad(true))
	}
	if spec != "" {
		return "", fmt.Errorf("unsupported format string passed to %s.__format__", typeName(v))
	}
	return toStr(v), nil
}

func formatString(s string, fs formatSpec) (string, error) {
	switch {
	case fs.typ != 0 && fs.typ != 's':
		return "", fmt.Errorf("unknown format code '%c' for object of type 'str'", fs.typ)
	case fs.sign != 0:
		return "", errors.New("sign not allowed in string format specifier")
	case fs.alt:
		return "", errors.New("alternate form (#) not allowed in string format specifier")
	case fs.grouping != 0:
		return "", fmt.Errorf("cannot specify '%c' with 's'", fs.grouping)
	case fs.align == '=':
		return "", errors.New("'=' alignment not allowed in string format specifier")
	}
	if fs.precision >= 0 && utf8.RuneCountInString(s) > fs.precision {
		s = string([]rune(s)[:fs.precision])
	}
	return pad("", s, fs, '<'), nil
}

// pad aligns sign+body to the spec's width; '=' puts the fill between
// them.
func pad(sign, body string, fs formatSpec, def byte) string {
	n := fs.width - utf8.RuneCountInString(sign) - utf8.RuneCountInString(body)
	if n <= 0 {
		return sign + body
	}
	fill := string(fs.fill)
	align := fs.align
	if align == 0 {
		align = def
	}
	switch align {
	case '<':
		return sign + body + strings.Repeat(fill, n)
	case '^':
		left := n / 2
		return strings.Repeat(fill, left) + sign + body + strings.Repeat(fill, n-left)
	case '=':
		return sign + strings.Repeat(fill, n) + body
	}
	return strings.Repeat(fill, n) + sign + body
}

// group inserts sep every every digits from the right of digits.
func group(digits string, sep byte, every int) string {
	if sep == 0 || len(digits) <= every {
		return digits
	}
	var b strings.Builder
	first := len(digits) % every
	if first > 0 {
		b.WriteString(digits[:first])
	}
	for i := first; i < len(digits); i += every {
		if b.Len() > 0 {
			b.WriteByte(sep)
		}
		b.WriteString(digits[i : i+every])
	}
	return b.String()
}

// zeroGroup pads digits with zeros and groups them until the grouped
// string is at least width long, as Python zero-pads a grouped number.
func zeroGroup(digits string, sep byte, every, width int) string {
	g := group(digits, sep, every)
	for len(g) < width {
		digits = "0" + digits
		g = group(digits, sep, every)
	}
	return g
}

func signOf(neg bool, fs formatSpec) string {
	switch {
	case neg:
		return "-"
	case fs.sign == '+':
		return "+"
	case fs.sign == ' ':
		return " "
	}
	return ""
}

func formatInt(x int64, fs formatSpec) (string, error) {
	switch fs.typ {
	case 'e', 'E', 'f', 'F', 'g', 'G', '%':
		return formatFloatSpec(float64(x), fs)
	case 0, 'd', 'n', 'b', 'o', 'x', 'X', 'c':
	default:
		return "", fmt.Errorf("unknown format code '%c' for object of type 'int'", fs.typ)
	}
	if fs.precision >= 0 {
		return "", errors.New("precision not allowed in integer format specifier")
	}
	if fs.z {
		return "", errors.New("negative zero coercion (z) not allowed in integer format specifier")
	}
	if fs.typ == 'c' {
		if fs.sign != 0 {
			return "", errors.New("sign not allowed with integer format specifier 'c'")
		}
		if fs.alt {
			return "", errors.New("alternate form (#) not allowed with integer format specifier 'c'")
		}
		if x < 0 || x > 0x10FFFF {
			return "", errors.New("%c arg not in range(0x110000)")
		}
		return pad("", string(rune(x)), fs, '<'), nil
	}
	if fs.grouping == ',' && fs.typ != 0 && fs.typ != 'd' {
		return "", fmt.Errorf("cannot specify ',' with '%c'", fs.typ)
	}
	if fs.grouping == '_' && fs.typ == 'n' {
		return "", errors.New("cannot specify '_' with 'n'")
	}
	neg := x < 0
	u := uint64(x)
	if neg {
		u = -u
	}
	base, prefix, every := 10, "", 3
	switch fs.typ {
	case 'b':
		base, prefix, every = 2, "0b", 4
	case 'o':
		base, prefix, every = 8, "0o", 4
	case 'x', 'X':
		base, prefix, every = 16, "0x", 4
	}
	digits := strconv.FormatUint(u, base)
	if fs.typ == 'X' {
		digits, prefix = strings.ToUpper(digits), "0X"
	}
	if !fs.alt {
		prefix = ""
	}
	sign := signOf(neg, fs) + prefix
	if fs.fill == '0' && fs.align == '=' && fs.grouping != 0 {
		digits = zeroGroup(digits, fs.grouping, every, fs.width-utf8.RuneCountInString(sign))
	} else {
		digits = group(digits, fs.grouping, every)
	}
	return pad(sign, digits, fs, '>'), nil
}

func formatFloatSpec(x float64, fs formatSpec) (string, error) {
	switch fs.typ {
	case 0, 'e', 'E', 'f', 'F', 'g', 'G', 'n', '%':
	default:
		return "", fmt.Errorf("unknown format code '%c' for object of type 'float'", fs.typ)
	}
	if fs.grouping != 0 && fs.typ == 'n' {
		return "", fmt.Errorf("cannot specify '%c' with 'n'", fs.grouping)
	}
	neg := math.Signbit(x) && !math.IsNaN(x)
	a := math.Abs(x)
	var body string
	upper := fs.typ == 'E' || fs.typ == 'F' || fs.typ == 'G'
	prec := fs.precision
	switch {
	case math.IsInf(a, 0):
		body = "inf"
	case math.IsNaN(a):
		body = "nan"
	default:
		switch fs.typ {
		case 'e', 'E':
			if prec < 0 {
				prec = 6
			}
			body = fixExponent(strconv.FormatFloat(a, 'e', prec, 64))
			if fs.alt && prec == 0 {
				body = strings.Replace(body, "e", ".e", 1)
			}
		case 'f', 'F', '%':
			if prec < 0 {
				prec = 6
			}
			if fs.typ == '%' {
				a *= 100
			}
			body = strconv.FormatFloat(a, 'f', prec, 64)
			if fs.alt && prec == 0 {
				body += "."
			}
		case 'g', 'G', 'n':
			if prec < 0 {
				prec = 6
			}
			body = generalFloat(a, prec, fs.alt, false)
		default:
			if prec < 0 {
				// No type and no precision: Python's repr, with the
				// spec's padding.
				body = pyFloat(a)
			} else {
				body = generalFloat(a, prec, fs.alt, true)
			}
		}
	}
	if upper {
		body = strings.ToUpper(body)
	}
	if fs.typ == '%' {
		body += "%"
	}
	if fs.z && neg && strings.Trim(body, "0.%e+-") == "" {
		neg = false
	}
	intEnd := strings.IndexFunc(body, func(c rune) bool { return c < '0' || c > '9' })
	if intEnd < 0 {
		intEnd = len(body)
	}
	digits, frac := body[:intEnd], body[intEnd:]
	finite := !math.IsInf(a, 0) && !math.IsNaN(a)
	if !finite {
		digits, frac = body, ""
	}
	sign := signOf(neg, fs)
	if finite && fs.grouping != 0 {
		if fs.fill == '0' && fs.align == '=' {
			digits = zeroGroup(digits, fs.grouping, 3, fs.width-utf8.RuneCountInString(sign)-utf8.RuneCountInString(frac))
		} else {
			digits = group(digits, fs.grouping, 3)
		}
	}
	return pad(sign, digits+frac, fs, '>'), nil
}

// generalFloat is the 'g' presentation of a non-negative finite float with
// prec significant digits: fixed or scientific by the exponent, trailing
// zeros removed unless alt. With noType (a precision and no type), fixed
// notation keeps at least one digit after the point and the exponent
// threshold follows repr's rule for the given precision.
func generalFloat(a float64, prec int, alt, noType bool) string {
	if prec == 0 {
		prec = 1
	}
	e := strconv.FormatFloat(a, 'e', prec-1, 64)
	exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	limit := prec
	if noType {
		limit = prec - 1
	}
	var s string
	if exp < -4 || exp >= limit {
		s = e
		if !alt {
			mant, ex, _ := strings.Cut(s, "e")
			if strings.Contains(mant, ".") {
				mant = strings.TrimRight(strings.TrimRight(mant, "0"), ".")
			}
			s = mant + "e" + ex
		}
		s = fixExponent(s)
	} else {
		s = strconv.FormatFloat(a, 'f', prec-1-exp, 64)
		if !alt && strings.Contains(s, ".") {
			s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
		}
		if alt && !strings.Contains(s, ".") {
			s += "."
		}
		if noType && !strings.Contains(s, ".") {
			s += ".0"
		}
	}
	return s
}

package chattemplate

import (
	"errors"
	"fmt"
	"html"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// truncateFilter is Jinja's truncate(length=255, killwords=False,
// end='...', leeway=5): a string longer than length+leeway is cut to
// length-len(end) characters (back to the last space unless killwords) and
// end appended.
func truncateFilter(v any, a argList) (any, error) {
	length, err := a.integer(0, "length", 255)
	if err != nil {
		return nil, err
	}
	killwords := a.boolean(1, "killwords", false)
	end, err := a.str(2, "end", "...")
	if err != nil {
		return nil, err
	}
	leeway, err := a.integer(3, "leeway", 5)
	if err != nil {
		return nil, err
	}
	endLen := int64(utf8.RuneCountInString(end))
	if length < endLen {
		return nil, fmt.Errorf("expected length >= %d, got %d", endLen, length)
	}
	if leeway < 0 {
		return nil, fmt.Errorf("expected leeway >= 0, got %d", leeway)
	}
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case undefined:
		return v, nil
	default:
		// Jinja measures and slices the value itself: a short list or
		// dict comes back as it is, anything else is an error.
		if n, ok := sizeOf(v); ok && int64(n) <= length+leeway {
			return v, nil
		}
		return nil, fmt.Errorf("truncate needs a string, not %s", typeName(v))
	}
	rs := []rune(s)
	if int64(len(rs)) <= length+leeway {
		return s, nil
	}
	cut := string(rs[:length-endLen])
	if !killwords {
		if i := strings.LastIndexByte(cut, ' '); i >= 0 {
			cut = cut[:i]
		}
	}
	return cut + end, nil
}

func sizeOf(v any) (int, bool) {
	switch x := v.(type) {
	case *List:
		return len(x.Items), true
	case *Dict:
		return x.Len(), true
	}
	return 0, false
}

// fileSizeFormat is Jinja's filesizeformat: a byte count in kB, MB, ...
// (powers of 1000) or KiB, MiB, ... (powers of 1024) with one decimal.
func fileSizeFormat(v any, binary bool) (any, error) {
	var n float64
	switch x := v.(type) {
	case string:
		f, ok := pyParseFloat(x)
		if !ok {
			return nil, fmt.Errorf("could not convert string to float: %s", toReprString(x))
		}
		n = f
	case bigInt:
		// float() of an integer past 64 bits: the nearest float.
		n, _ = strconv.ParseFloat(string(x), 64)
	default:
		f, ok := asNumber(v)
		if !ok {
			return nil, fmt.Errorf("float() argument must be a string or a real number, not '%s'", typeName(v))
		}
		n = f
	}
	base := 1000.0
	prefixes := []string{"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"}
	if binary {
		base = 1024
		prefixes = []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"}
	}
	switch {
	case n == 1:
		return "1 Byte", nil
	case n < base:
		i, err := floatToInt(n, 0)
		if err != nil {
			return nil, err
		}
		return fmt.Sprintf("%d Bytes", i), nil
	}
	// The prefix is the first whose next power exceeds n, else the last;
	// each power is the float nearest to the exact integer, as Python's
	// division of a float by an int rounds it.
	i := 0
	for i < len(prefixes)-1 && !lessThanPower(n, base, i+2) {
		i++
	}
	return formatFloatC(base*n/unitPower(base, i+2), 'f', 1) + " " + prefixes[i], nil
}

// lessThanPower reports n < base**k with the power exact, as Python
// compares a float with an int.
func lessThanPower(n, base float64, k int) bool {
	if math.IsNaN(n) {
		return false
	}
	p := new(big.Int).Exp(big.NewInt(int64(base)), big.NewInt(int64(k)), nil)
	return big.NewFloat(n).Cmp(new(big.Float).SetInt(p)) < 0
}

// unitPower is base**k as the nearest float: exact for 1024, and parsed
// from its decimal form for 1000, whose large powers are not exact.
func unitPower(base float64, k int) float64 {
	if base == 1024 {
		return math.Ldexp(1, 10*k)
	}
	f, _ := strconv.ParseFloat("1e"+strconv.Itoa(3*k), 64)
	return f
}

// stripTags is Jinja's striptags (markupsafe's): comments, then tags,
// removed as markupsafe removes them (a removal can join the text around
// it into a new mark, which is removed in turn), whitespace runs collapsed
// to single spaces, and HTML entities unescaped.
func (r *renderer) stripTags(s string) (any, error) {
	// The text before a removed comment holds no "<!--", so a new one
	// can only begin in its last three bytes; a tag, only where the
	// removed one began.
	s, err := r.removeMarks(s, "<!--", "-->", 3)
	if err != nil {
		return nil, err
	}
	if s, err = r.removeMarks(s, "<", ">", 0); err != nil {
		return nil, err
	}
	return html.UnescapeString(strings.Join(splitWhitespace(s, -1, false), " ")), nil
}

// removeMarks removes every open...close span of s, left to right, looking
// again back bytes before where each removal joined the text, which may
// form a new span.
func (r *renderer) removeMarks(s, open, close string, back int) (string, error) {
	for from := 0; ; {
		i := strings.Index(s[from:], open)
		if i < 0 {
			return s, nil
		}
		start := from + i
		j := strings.Index(s[start:], close)
		if j < 0 {
			return s, nil
		}
		s = s[:start] + s[start+j+len(close):]
		from = max(start-back, 0)
		if err := r.step(int64(len(s)>>6) + 1); err != nil {
			return "", err
		}
	}
}

// xmlAttr is Jinja's xmlattr: key="value" pairs, HTML-escaped, for the
// dict's items that are neither None nor undefined, with a leading space
// when autospace and any.
func xmlAttr(v any, autospace bool) (any, error) {
	d, ok := v.(*Dict)
	if !ok {
		return nil, fmt.Errorf("'%s' object has no attribute 'items'", typeName(v))
	}
	var parts []string
	for i, k := range d.keys {
		val := d.vals[i]
		if _, undef := val.(undefined); undef || val == nil {
			continue
		}
		ks := toStr(k)
		if strings.ContainsAny(ks, "/>=") || strings.IndexFunc(ks, pyIsSpace) >= 0 {
			return nil, fmt.Errorf("invalid character in attribute name: %s", toReprString(ks))
		}
		parts = append(parts, htmlEscape(ks)+`="`+htmlEscape(toStr(val))+`"`)
	}
	out := strings.Join(parts, " ")
	if autospace && out != "" {
		out = " " + out
	}
	return out, nil
}

// urlEncode is Jinja's urlencode: a string (or any non-iterable) quoted
// for a URL path ('/' kept), a dict's items or a sequence of pairs as a
// query string (spaces as '+').
func urlEncode(v any) (any, error) {
	switch x := v.(type) {
	case string:
		return urlQuote(x, false), nil
	case *Dict:
		parts := make([]string, len(x.keys))
		for i, k := range x.keys {
			parts[i] = urlQuote(toStr(k), true) + "=" + urlQuote(toStr(x.vals[i]), true)
		}
		return strings.Join(parts, "&"), nil
	case *List:
		parts := make([]string, len(x.Items))
		for i, it := range x.Items {
			pair, ok := it.(*List)
			if !ok || len(pair.Items) != 2 {
				return nil, errors.New("urlencode expects a dict or a sequence of pairs")
			}
			parts[i] = urlQuote(toStr(pair.Items[0]), true) + "=" + urlQuote(toStr(pair.Items[1]), true)
		}
		return strings.Join(parts, "&"), nil
	}
	return urlQuote(toStr(v), false), nil
}

// urlQuote is Python's urllib.parse.quote of the UTF-8 bytes: letters,
// digits and "_.-~" kept (and '/' unless forQuery), everything else
// percent-encoded; in a query a space is '+'.
func urlQuote(s string, forQuery bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-', c == '~':
			b.WriteByte(c)
		case c == '/' && !forQuery:
			b.WriteByte(c)
		case c == ' ' && forQuery:
			b.WriteByte('+')
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

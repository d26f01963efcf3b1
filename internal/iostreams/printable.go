package iostreams

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Printable returns s ready for a terminal or a table cell: control
// characters (C0, DEL, C1), the Unicode line and paragraph separators and
// the bidirectional overrides are written as Go escapes (\x1b, \n, \u202e),
// and invalid UTF-8 as \ufffd. Fleet records (keys, model names, component
// names) come from the network: printed raw, one could clear the screen,
// retitle the terminal, or split a table row in two.
func Printable(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for _, r := range s {
		switch {
		case r == utf8.RuneError:
			b.WriteString(`\ufffd`)
		case escaped(r) && r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case escaped(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func needsEscape(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || escaped(r) {
			return true
		}
	}
	return false
}

func escaped(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r < 0xa0:
		return true
	case r == 0x2028, r == 0x2029: // line and paragraph separators
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069: // bidi embeddings, overrides, isolates
		return true
	}
	return false
}

package iostreams_test

import (
	"testing"

	"github.com/continuum-router/continuum/internal/iostreams"
)

func TestPrintable(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Qwen/Qwen3-32B", "Qwen/Qwen3-32B"},
		{"모델 ü ✓", "모델 ü ✓"},
		{"a\x1b[2Jb", `a\x1b[2Jb`},
		{"t\x1b]0;title\x07", `t\x1b]0;title\x07`},
		{"row\r\nnext\ttab", `row\x0d\x0anext\x09tab`},
		{"del\x7f c1\u0085 \u009b", `del\x7f c1\x85 \x9b`},
		{"ls\u2028ps\u2029", `ls\u2028ps\u2029`},
		{"abc\u202egpj.exe \u2066x\u2069", `abc\u202egpj.exe \u2066x\u2069`},
		{"bad\xffutf8", `bad\ufffdutf8`},
		{"", ""},
	}
	for _, tc := range tests {
		if got := iostreams.Printable(tc.in); got != tc.want {
			t.Errorf("Printable(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

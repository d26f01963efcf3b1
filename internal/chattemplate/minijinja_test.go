package chattemplate

import (
	"math"
	"testing"
)

// TestSerdeFloat: floats as serde_json writes them (the ryu crate's
// shortest form), where Python's repr differs (1e-05, 1e+16, 0.0001 as
// 1e-05's neighbour).
func TestSerdeFloat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		f    float64
		want string
	}{
		{0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{1, "1.0"},
		{-2.5, "-2.5"},
		{0.1, "0.1"},
		{0.3, "0.3"},
		{123.456, "123.456"},
		{1e15, "1000000000000000.0"},
		{1e16, "1e16"},
		{1.5e16, "1.5e16"},
		{12345678901234567, "1.2345678901234568e16"},
		{1234567890123456, "1234567890123456.0"},
		{0.001234, "0.001234"},
		{0.0001, "0.0001"},
		{0.00001, "0.00001"},
		{0.000025, "0.000025"},
		{1e-6, "1e-6"},
		{1.5e-7, "1.5e-7"},
		{1.5e300, "1.5e300"},
		{5e-324, "5e-324"},
		{math.MaxFloat64, "1.7976931348623157e308"},
	} {
		if got := serdeFloat(tc.f); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.f, got, tc.want)
		}
	}
}

// TestMinijinjaEscapes: string literals decoded as minijinja 2.18 and
// later decode them (its utils.rs unescape): JSON's escapes, UTF-16 pairs,
// a byte's value from \x or octal, and any other escape kept as written.
func TestMinijinjaEscapes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`plain`, "plain"},
		{`\"\\\/\'\b\f\n\r\t`, "\"\\/'\b\f\n\r\t"},
		{"a\\\nb", "a\\\nb"},
		{`\a\v\U0001F600\N{DASH}\q\ `, `\a\v\U0001F600\N{DASH}\q\ `},
		{`\u00e9\u+0e9\ud83d\udca9`, "\u00e9\u00e9\U0001F4A9"},
		{`\x41\xff\x+1`, "A\u00ff\x01"},
		{`\0\101\1010\377`, "\x00AA0\u00ff"},
		{`\ud83d`, ""}, {`\ud83dx`, ""}, {`\udca9\ud83d`, ""}, {`\ud83d\ud83d`, ""}, {`\ud83d\u0041`, ""},
		{`\u12`, ""}, {`\u12g4`, ""}, {`\x4`, ""}, {`\xg1`, ""}, {`\400`, ""}, {`\u-123`, ""}, {`\x++`, ""},
	} {
		got, err := mjUnescape(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("%q: %q, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

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

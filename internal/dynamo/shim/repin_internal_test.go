package shim

import (
	"regexp"
	"strconv"
	"testing"
)

// FuzzContainsNumber: a frontend's error body names an instance id when
// the id stands in it as a whole decimal number, as a regular expression
// reads it.
func FuzzContainsNumber(f *testing.F) {
	for _, s := range []string{"instance 42 not found", "x420", "42", "0042", "worker_id=42,", "", "4242 42"} {
		f.Add([]byte(s), uint64(42))
	}
	f.Add([]byte("id 18446744073709551615."), uint64(18446744073709551615))
	f.Fuzz(func(t *testing.T, body []byte, id uint64) {
		num := strconv.AppendUint(nil, id, 10)
		want := regexp.MustCompile(`(^|[^0-9])` + string(num) + `($|[^0-9])`).Match(body)
		if got := containsNumber(body, num); got != want {
			t.Fatalf("%q names %d: %v, want %v", body, id, got, want)
		}
	})
}

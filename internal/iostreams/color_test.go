package iostreams

import "testing"

// TestColorFor: colour on a terminal unless NO_COLOR holds a value (an
// empty NO_COLOR is no request, as no-color.org reads it) or TERM is dumb.
func TestColorFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tty      bool
		env      map[string]string
		want     bool
		scenario string
	}{
		{true, nil, true, "a terminal"},
		{false, nil, false, "no terminal"},
		{true, map[string]string{"NO_COLOR": "1"}, false, "NO_COLOR=1"},
		{true, map[string]string{"NO_COLOR": ""}, true, "NO_COLOR empty"},
		{true, map[string]string{"TERM": "dumb"}, false, "TERM=dumb"},
	} {
		if got := colorFor(tc.tty, func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("%s: colour %v, want %v", tc.scenario, got, tc.want)
		}
	}
}

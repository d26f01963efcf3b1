package testutil

import (
	"fmt"
	"os"
	"testing"
)

// InCI reports whether the tests run in CI (CI set, as .ci/run does).
func InCI() bool { return os.Getenv("CI") != "" }

// SkipOrFailInCI skips the test because a prerequisite is missing, except in
// CI, where .ci/run installs every prerequisite and a skip would hide a
// failure: there the test fails with the same reason.
func SkipOrFailInCI(t testing.TB, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("%s (CI is set: .ci/run provides this, so the test fails instead of skipping)", why)
	}
	t.Skip(why)
}

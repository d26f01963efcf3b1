package kvstack_test

import (
	"testing"

	"github.com/continuum-router/continuum/internal/testutil"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

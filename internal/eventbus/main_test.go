package eventbus_test

import (
	"testing"

	"github.com/continuum-router/continuum/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

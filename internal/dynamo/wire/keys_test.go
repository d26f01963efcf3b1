package wire_test

import (
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

func TestFileStoreName(t *testing.T) {
	if got := wire.FileStoreName("dynamo/backend-x/generate/7a_1"); got != "dynamo%2Fbackend%2Dx%2Fgenerate%2F7a%5F1" {
		t.Errorf("FileStoreName: %s", got)
	}
}

package testutil

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// VerifyNoLeaks runs a package's tests and fails them when a goroutine
// outlives them. Idle keep-alive connections of http.DefaultClient are
// closed first (they are a pool, not a leak), and goroutines that
// third-party test peers leave behind by design are ignored: go-zeromq's
// PUB socket keeps its writer goroutine after Close.
func VerifyNoLeaks(m *testing.M) {
	code := m.Run()
	if code == 0 {
		http.DefaultClient.CloseIdleConnections()
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run")); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

package serve_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/cli/serve"
	"github.com/continuum-router/continuum/internal/iostreams"
)

type slogLogger = slog.Logger

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// startServe runs serve with opts (streams, environment, grace and logger
// filled in when unset) until ctx ends, and returns its base URL and the
// channel its result arrives on.
func startServe(t *testing.T, ctx context.Context, opts *serve.Options) (base string, done <-chan error) {
	t.Helper()
	var errOut interface{ String() string }
	if opts.IO == nil {
		ios, _, _, e := iostreams.Test()
		opts.IO, errOut = ios, e
	}
	if opts.Env == nil {
		opts.Env = os.LookupEnv
	}
	if opts.Grace == 0 {
		opts.Grace = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = func() (*slogLogger, error) { return discardLogger(), nil }
	}
	addr := make(chan string, 1)
	opts.Ready = func(main, _ string) { addr <- main }
	ch := make(chan error, 1)
	go func() { ch <- serve.Run(ctx, opts) }()
	select {
	case a := <-addr:
		return "http://" + a, ch
	case err := <-ch:
		if errOut != nil {
			t.Fatalf("serve: %v %s", err, errOut.String())
		}
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start within 30 s")
	}
	return "", nil
}

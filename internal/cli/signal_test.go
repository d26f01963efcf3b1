package cli_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// TestSignalEndsStdinCommands: the first SIGINT or SIGTERM only ends a
// command's context (a second ends the process): a command reading its
// standard input from a producer that neither writes nor closes ends with
// it all the same, rather than waiting on the read.
func TestSignalEndsStdinCommands(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "tokenizer.json")
	// A minimal WordLevel tokenizer.
	if err := os.WriteFile(tok, []byte(`{"version":"1.0","model":{"type":"WordLevel","vocab":{"[UNK]":0,"hi":1},"unk_token":"[UNK]"},"pre_tokenizer":{"type":"Whitespace"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"kv-inspect", "tokenize", "--tokenizer", tok},
		{"pin-artifact", "-"},
		{"kv-inspect", "match", "--source", "file", "--file-root", dir},
	} {
		t.Run(args[0]+" "+args[1], func(t *testing.T) {
			t.Setenv("CONTINUUM_CONFIG", "")
			pr, pw := io.Pipe() // a producer that never writes nor closes
			t.Cleanup(func() { _ = pw.Close() })
			ios, _, _, errOut := iostreams.Test()
			ios.In = pr
			f := &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan int, 1)
			go func() { done <- cli.Run(ctx, f, args) }()
			time.Sleep(300 * time.Millisecond)
			cancel() // the first SIGTERM
			select {
			case code := <-done:
				if code != cmdutil.ExitFailure {
					t.Errorf("%v ended with exit %d, want %d: %s", args, code, cmdutil.ExitFailure, errOut.String())
				}
			case <-time.After(3 * time.Second):
				t.Errorf("%v still running 3s after its context ended (the first SIGINT/SIGTERM)", args)
				_ = pw.Close() // let it go
				<-done
			}
		})
	}
}

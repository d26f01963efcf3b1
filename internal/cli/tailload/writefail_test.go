package tailload_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/testutil"
)

// fullWriter is a standard output that refuses every write, as /dev/full
// (or a full disk under `> samples.jsonl`) does.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) {
	return 0, &os.PathError{Op: "write", Path: "/dev/stdout", Err: syscall.ENOSPC}
}

// TestTailLoadWriteErrorFails: a tail whose standard output cannot be
// written stops and exits 1, as every other command does: a script
// capturing samples to a file on a full disk must not take the empty file
// for the samples it asked for.
func TestTailLoadWriteErrorFails(t *testing.T) {
	pub := publishingSamples(t)
	for _, args := range [][]string{
		{"tail-load", "--json", "--count", "3", pub.Endpoint},
		{"tail-load", "--count", "3", pub.Endpoint},
	} {
		t.Setenv("CONTINUUM_CONFIG", "")
		ios, _, _, errOut := iostreams.Test()
		ios.Out = fullWriter{}
		f := &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv}
		rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
		code := cli.Run(rctx, f, args)
		timedOut := errors.Is(rctx.Err(), context.DeadlineExceeded)
		rcancel()
		if timedOut {
			t.Fatalf("%v: still running after 20s", args)
		}
		if code == cmdutil.ExitOK {
			t.Errorf("%v with a standard output that refuses every write: exit 0, stderr:\n%s", args, errOut.String())
		}
	}
}

// TestTailLoadChecks: tail-load applies "the checks
// the router applies to each message (frame version, topic, publisher
// identity, sequence order, 16 KiB payload cap)"; each is reported by its
// result name, and the summary counts them.
func TestTailLoadChecks(t *testing.T) {
	pub := testutil.StartGoPublisher(t)
	ok := func(seq uint64) [][]byte {
		return wire.EncodeEventMessage("kv_metrics", 9, seq, 0, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 3, KVUsedBlocks: u64(seq)}))
	}
	// The batch goes out once, after tail-load's subscription reached the
	// publisher: a subscription landing in the middle of a batch sent over
	// and over would make the first six messages another mix.
	sent := false
	publishUntilDone(t, func() {
		if sent || !pub.Subscribed() {
			time.Sleep(5 * time.Millisecond)
			return
		}
		sent = true
		_ = pub.Send(ok(1))
		_ = pub.Send(ok(1)) // duplicate
		_ = pub.Send(ok(0)) // older
		m := ok(2)
		m[1] = []byte{0, 0, 0, 0, 0, 0, 0, 8} // frame publisher id != envelope
		_ = pub.Send(m)
		m = wire.EncodeEventMessage("kv_metricsX", 9, 3, 0, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 3}))
		m[0] = []byte("kv_metrics")
		_ = pub.Send(m)
		big := make([]byte, 17<<10)
		_ = pub.Send(wire.EncodeEventMessage("kv_metrics", 9, 4, 0, big))
	})
	code, out, errOut := run(t, "tail-load", "--json", "--count", "6", pub.Endpoint)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{`"kv_used_blocks":1}`, `"result":"duplicate"`, `"result":"identity_mismatch"`, `"result":"topic_mismatch"`, `"result":"oversized"`} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "6 messages: 1 accepted, 2 duplicate, 1 identity_mismatch, 1 oversized, 1 topic_mismatch") {
		t.Errorf("summary: %q", errOut)
	}
}

// publishingSamples starts a publisher that sends worker 3's samples
// (publisher 9, sequence 0, 1, ...) every 2 ms until the test ends, so
// that a tail subscribing at any moment has lines to write.
func publishingSamples(t *testing.T) *testutil.GoPublisher {
	t.Helper()
	pub := testutil.StartGoPublisher(t)
	seq := uint64(0)
	publishUntilDone(t, func() {
		_ = pub.Send(wire.EncodeEventMessage("kv_metrics", 9, seq, 0, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 3, KVUsedBlocks: u64(seq)})))
		seq++
		time.Sleep(2 * time.Millisecond)
	})
	return pub
}

// publishUntilDone calls send over and over on a goroutine of its own
// until the test ends.
func publishUntilDone(t *testing.T, send func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			send()
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

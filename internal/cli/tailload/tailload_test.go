package tailload_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/cli/tailload"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/testutil"
)

func u64(v uint64) *uint64 { return &v }

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	t.Setenv("CONTINUUM_CONFIG", "")
	ios, _, out, errOut := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := cli.Run(ctx, f, args)
	return code, out.String(), errOut.String()
}

// TestTailLibzmqJSON: `tail-load --json --count 5` against a libzmq
// publisher prints five decoded samples.
func TestTailLibzmqJSON(t *testing.T) {
	var msgs [][][]byte
	for seq := range uint64(2000) {
		l := wire.ActiveLoad{WorkerID: 1186445869714687, DPRank: 1, KVUsedBlocks: u64(seq)}
		if seq%2 == 0 {
			l.ActiveDecodeBlocks = u64(7)
		}
		msgs = append(msgs, wire.EncodeEventMessage("kv_metrics", 0x1f3a4b, seq, 1_700_000_000_000+seq, wire.EncodeActiveLoad(l)))
	}
	pub := testutil.StartLibzmqPublisher(t, msgs, 2*time.Millisecond)
	pub.Go()
	code, out, errOut := run(t, "tail-load", "--json", "--count", "5", pub.Endpoint)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	for _, line := range lines {
		var l tailload.Line
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if l.PublisherID != "2046539" || l.Topic != "kv_metrics" || *l.WorkerID != "1186445869714687" || *l.DPRank != 1 ||
			l.KVUsedBlocks == nil || *l.PublishedAt != 1_700_000_000_000+l.Sequence || *l.KVUsedBlocks != l.Sequence {
			t.Errorf("line %s", line)
		}
		if (l.Sequence%2 == 0) != (l.ActiveDecodeBlocks != nil) || l.ActivePrefillTokens != nil {
			t.Errorf("nulls not kept: %s", line)
		}
		if !strings.Contains(line, `"active_prefill_tokens":null`) {
			t.Errorf("null field missing from %s", line)
		}
	}
	if !strings.Contains(errOut, "5 messages: 5 accepted") {
		t.Errorf("summary: %q", errOut)
	}
}

// TestTailRejectsAndRaw: rejected frames print their result; --raw dumps.
func TestTailRejectsAndRaw(t *testing.T) {
	pub := testutil.StartGoPublisher(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := uint64(0); ctx.Err() == nil; seq++ {
			m := wire.EncodeEventMessage("kv_metrics", 9, seq, 0, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 3}))
			m[3][0] = 2 // unknown frame version
			_ = pub.Send(m)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	code, out, errOut := run(t, "tail-load", "--json", "--raw", "--count", "2", pub.Endpoint)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Count(out, `"result":"unknown_version"`) != 2 || !strings.Contains(out, `"frames":["6b765f6d657472696373"`) {
		t.Errorf("output:\n%s", out)
	}
}

// TestTailFleet: without an endpoint, every kv_metrics publisher of the
// fleet (here from Dynamo's file store) is tailed; a publisher that cannot
// be reached is named on stderr by its id, with why, never its address,
// and its failures do not count as messages.
func TestTailFleet(t *testing.T) {
	pub := testutil.StartGoPublisher(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	root := t.TempDir()
	dir := filepath.Join(root, "v1/event_channels")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id       int
		endpoint string
	}{{77, pub.Endpoint}, {78, "tcp://" + closed}} {
		rec := fmt.Sprintf(`{"type":"EventChannel","scope":{"kind":"namespace","name":"dynamo"},"topic":"kv_metrics","instance_id":%d,"transport":{"kind":"Zmq","config":{"endpoint":%q}}}`, c.id, c.endpoint)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("namespace%%2Fdynamo%%2Ftopic%%2Fkv_metrics%%2F%x", c.id)), []byte(rec), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The command runs beside the test, its stderr read as it goes: 77
	// publishes only once 78's failure is told (a failure after the
	// count is reached is not: the tail is over).
	t.Setenv("CONTINUUM_CONFIG", "")
	ios, _, stdout, _ := iostreams.Test()
	var stderr testutil.SyncBuffer
	ios.ErrOut = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exit := make(chan int, 1)
	go func() {
		exit <- cli.Run(ctx, &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv}, []string{"tail-load", "--source", "file", "--file-root", root, "--count", "3"})
	}()
	testutil.Eventually(t, 20*time.Second, "publisher 78's failure told", func() bool {
		return strings.Contains(stderr.String(), "publisher 78:")
	})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := uint64(0); ctx.Err() == nil; seq++ {
			_ = pub.Send(wire.EncodeEventMessage("kv_metrics", 77, seq, 0, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 5, ActivePrefillTokens: u64(100)})))
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	code := <-exit
	errOut := stderr.String()
	out := stdout.String()
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Count(out, "pub=77") != 3 || !strings.Contains(out, "prefill=100") || !strings.Contains(errOut, "2 kv_metrics publishers") ||
		!strings.Contains(errOut, "publisher 78: connection refused") || strings.Contains(errOut+out, closed) || !strings.Contains(errOut, "3 messages") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", out, errOut)
	}
}

// TestTailRejectDetailEscaped: a rejection's detail quoting what the
// publisher sent (here a field name of its ActiveLoad carrying terminal
// controls) is printed escaped in the text lines, and kept as sent in the
// JSON lines, whose encoder escapes it.
func TestTailRejectDetailEscaped(t *testing.T) {
	const evil = "x\x1b]0;owned\x07\x1b[2J"
	// {"worker_id": 3, evil: <0xc1, never a msgpack type>}
	payload := append([]byte{0x82, 0xa9}, "worker_id"...)
	payload = append(append(append(payload, 0x03, 0xa0|byte(len(evil))), evil...), 0xc1)
	pub := testutil.StartGoPublisher(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := uint64(0); ctx.Err() == nil; seq++ {
			_ = pub.Send(wire.EncodeEventMessage("kv_metrics", 9, seq, 0, payload))
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	code, out, errOut := run(t, "tail-load", "--count", "1", pub.Endpoint)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "REJECT malformed") || strings.ContainsAny(out, "\x1b\x07") || !strings.Contains(out, `x\x1b]0;owned\x07\x1b[2J`) {
		t.Errorf("text line %q", out)
	}
	code, out, errOut = run(t, "tail-load", "--json", "--count", "1", pub.Endpoint)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r tailload.RejectLine
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Result != "malformed" || !strings.Contains(r.Detail, evil) || strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("JSON line %q (%v)", out, err)
	}
}

// TestTailBadEndpoint: an endpoint that could never be dialled is a usage
// error, not a connection retried for ever.
func TestTailBadEndpoint(t *testing.T) {
	for arg, want := range map[string]string{"ipc:///tmp/x": "tcp://host:port", "tcp://127.0.0.1:99999": "port number",
		"tcp://127.0.0.1:0": "port number", "tcp://127.0.0.1:zmq": "port number", "tcp://*:5555": "tcp://host:port"} {
		if code, _, errOut := run(t, "tail-load", arg); code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("%s: exit %d: %s", arg, code, errOut)
		}
	}
}

// TestTailEndpointRefusesDiscoveryFlags: with an endpoint the fleet is not
// read, so a discovery flag (or --timeout) is a usage error rather than
// ignored.
func TestTailEndpointRefusesDiscoveryFlags(t *testing.T) {
	for _, flag := range [][]string{{"--etcd-endpoints", "http://e:2379"}, {"--kube-namespace", "dynamo"}, {"--source", "file"}, {"--timeout", "1s"}} {
		code, out, errOut := run(t, append([]string{"tail-load"}, append(flag, "tcp://127.0.0.1:1")...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, flag[0]+" reads the fleet") {
			t.Errorf("%v: exit %d\n%s%s", flag, code, out, errOut)
		}
	}
}

// TestTailSourceErrorsAlone: a configuration that cannot be read, or a
// source that cannot be reached, exits with its error as the only line
// (no summary of a tail that never began).
func TestTailSourceErrorsAlone(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"config", []string{"tail-load", "--config", filepath.Join(t.TempDir(), "missing.yaml")}, 2, "error: configuration unreadable: "},
		{"source", []string{"tail-load", "--source", "file", "--file-root", filepath.Join(t.TempDir(), "missing"), "--timeout", "1s"}, 1, "error: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, tc.args...)
			lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
			if code != tc.code || out != "" || !strings.HasPrefix(lines[len(lines)-1], tc.want) || strings.Contains(errOut, "messages:") {
				t.Fatalf("exit %d\nstdout: %q\nstderr: %q", code, out, errOut)
			}
		})
	}
}

// TestTailEndpointFailureOnce: a publisher that refuses every attempt is
// named once, not once per retry.
func TestTailEndpointFailureOnce(t *testing.T) {
	t.Setenv("CONTINUUM_CONFIG", "")
	ios, _, _, errOut := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // a port that refuses
	if code := cli.Run(ctx, f, []string{"tail-load", "tcp://" + addr}); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if n := strings.Count(errOut.String(), "refused"); n != 1 {
		t.Fatalf("%d failure lines:\n%s", n, errOut)
	}
}

// TestCountNotReached: interrupted before --count messages came, the tail
// exits 1 and says how many came; without --count an interruption is
// the normal end.
func TestCountNotReached(t *testing.T) {
	t.Setenv("CONTINUUM_CONFIG", "")
	pub := testutil.StartGoPublisher(t) // publishes nothing
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"tail-load", "--count", "5", pub.Endpoint}, 1, "interrupted after 0 of the 5 messages --count asked for"},
		{[]string{"tail-load", pub.Endpoint}, 0, "tail-load: 0 messages: none"},
	} {
		ios, _, _, errOut := iostreams.Test()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		code := cli.Run(ctx, &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv}, c.args)
		cancel()
		if code != c.code || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d saying %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

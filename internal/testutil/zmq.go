package testutil

import (
	"bufio"
	"context"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/continuum-router/continuum/internal/loopport"
)

// GoPublisher is a go-zeromq/zmq4 PUB socket bound to a loopback port.
type GoPublisher struct {
	Endpoint string
	sock     zmq4.Socket
	cancel   context.CancelFunc
}

// StartGoPublisher binds a PUB socket that closes when the test ends, on a
// port outside the kernel's ephemeral range, so that a test restarting it
// on its address (StartGoPublisherAt) does not find the port taken by some
// connection in between.
func StartGoPublisher(t testing.TB) *GoPublisher {
	t.Helper()
	for range 5 {
		addr, err := loopport.FreeAddr()
		if err != nil {
			break
		}
		if p, err := startGoPublisher("tcp://" + addr); err == nil {
			t.Cleanup(p.Close)
			return p
		}
	}
	return StartGoPublisherAt(t, "tcp://127.0.0.1:0")
}

func startGoPublisher(endpoint string) (*GoPublisher, error) {
	ctx, cancel := context.WithCancel(context.Background())
	sock := zmq4.NewPub(ctx)
	if err := sock.Listen(endpoint); err != nil {
		cancel()
		return nil, err
	}
	return &GoPublisher{Endpoint: "tcp://" + sock.Addr().String(), sock: sock, cancel: cancel}, nil
}

// StartGoPublisherAt binds a PUB socket at endpoint (a publisher that
// restarts on its old address).
func StartGoPublisherAt(t testing.TB, endpoint string) *GoPublisher {
	t.Helper()
	p, err := startGoPublisher(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Subscribed reports whether a subscriber's subscription has reached the
// publisher: what it sends from then on reaches that subscriber (a message
// sent before is dropped, as a PUB socket drops what no one asked for).
func (p *GoPublisher) Subscribed() bool {
	t, ok := p.sock.(zmq4.Topics)
	return ok && len(t.Topics()) > 0
}

// Send publishes one multipart message.
func (p *GoPublisher) Send(frames [][]byte) error { return p.sock.Send(zmq4.NewMsgFrom(frames...)) }

// Close stops the publisher (again: a no-op).
func (p *GoPublisher) Close() {
	_ = p.sock.Close()
	p.cancel()
}

// Python is the interpreter whose python3-zmq binds libzmq (Debian's).
const Python = "/usr/bin/python3"

// RequireLibzmq skips the test when python3-zmq is missing, except in CI
// (CI set), where .ci/run installs it and a skip would hide a failure.
func RequireLibzmq(t testing.TB) {
	t.Helper()
	if err := exec.Command(Python, "-c", "import zmq").Run(); err != nil {
		SkipOrFailInCI(t, "libzmq through python3-zmq is not installed (apt-get install python3-zmq): %v", err)
	}
}

// RequirePythonModule skips the test when module cannot be imported by
// Python, except in CI, where .ci/run installs the Debian package pkg that
// holds it and a skip would hide a failure.
func RequirePythonModule(t testing.TB, module, pkg string) {
	t.Helper()
	if err := exec.Command(Python, "-c", "import "+module).Run(); err != nil {
		SkipOrFailInCI(t, "python3 module %s is not installed (apt-get install %s): %v", module, pkg, err)
	}
}

const libzmqPublisher = `
import sys, time, zmq
msgs = [[bytes.fromhex(f) for f in line.split(",")] for line in open(sys.argv[1]).read().split("\n") if line]
interval = float(sys.argv[2])
ctx = zmq.Context()
pub = ctx.socket(zmq.PUB)
port = pub.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)
sys.stdin.readline()   # wait until the test says go
for m in msgs:
    pub.send_multipart(m)
    time.sleep(interval)
sys.stdin.readline()   # then idle until the test ends
`

// LibzmqPublisher is a libzmq PUB socket in a python3 child process.
type LibzmqPublisher struct {
	Endpoint string
	stdin    interface{ Write([]byte) (int, error) }
}

// StartLibzmqPublisher binds a libzmq PUB socket on a dynamic loopback port;
// Go sends msgs, one every interval.
func StartLibzmqPublisher(t testing.TB, msgs [][][]byte, interval time.Duration) *LibzmqPublisher {
	t.Helper()
	RequireLibzmq(t)
	file := WriteMessagesFile(t, msgs)
	_, in, out := StartPython(t, libzmqPublisher, file, strconv.FormatFloat(interval.Seconds(), 'f', -1, 64))
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("libzmq publisher: %v", err)
	}
	return &LibzmqPublisher{Endpoint: "tcp://127.0.0.1:" + strings.TrimSpace(line), stdin: in}
}

// Go starts sending.
func (p *LibzmqPublisher) Go() { _, _ = p.stdin.Write([]byte("\n")) }

// StartPython runs script with args under the Python that has libzmq,
// with its stderr on the test's, and returns the process, its stdin and
// its stdout. The test's cleanup closes stdin and kills and reaps the
// process (harmless if the test already did).
func StartPython(t testing.TB, script string, args ...string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(Python, append([]string{"-c", script}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, in, bufio.NewReader(out)
}

// WriteMessagesFile writes msgs for the python3 libzmq scripts to send,
// one message a line, its frames in hex separated by commas, and returns
// the file's path.
func WriteMessagesFile(t testing.TB, msgs [][][]byte) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "messages")
	var b strings.Builder
	for _, m := range msgs {
		for i, f := range m {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(hex.EncodeToString(f))
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

package load_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/testutil"
)

// peerEnv makes the test binary act as an idle ZMTP PUB peer (a separate
// process, so that its memory is not counted in the subscriber's).
const peerEnv = "CONTINUUM_TEST_IDLE_ZMTP_PEER"

func TestMain(m *testing.M) {
	if os.Getenv(peerEnv) != "" {
		idlePeer()
		return
	}
	testutil.VerifyNoLeaks(m)
}

func idlePeer() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); os.Exit(0) }()
	greeting := make([]byte, 64)
	greeting[0], greeting[9], greeting[10] = 0xFF, 0x7F, 3
	copy(greeting[12:], "NULL")
	body := []byte("\x05READY\x0bSocket-Type\x00\x00\x00\x03PUB")
	ready := append([]byte{0x04, byte(len(body))}, body...)
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func(c net.Conn) {
			_, _ = c.Write(append(append([]byte{}, greeting...), ready...))
			_, _ = io.Copy(io.Discard, c) // idle: never publishes
		}(c)
	}
}

// startIdlePeer runs the peer process and returns its endpoint.
func startIdlePeer(tb testing.TB) string {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), peerEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = in.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		tb.Fatal(err)
	}
	return "tcp://127.0.0.1:" + strings.TrimSpace(line)
}

package main_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestFaultsInterruptedPrintsFinished: an interrupted `bench --faults`
// still prints the scenarios it finished and exits 1 (a full run takes
// minutes; the scenarios done before the interrupt are measured results),
// and says each scenario's verdict on stderr as it ends.
func TestFaultsInterruptedPrintsFinished(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	cmd := exec.Command(bin, "bench", "--faults", "--scenarios", "publisher-silenced,decode-killed", "--baseline", "1s", "--hold", "1s",
		"--rate", "5", "--lease-ttl", "10s")
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The interrupt comes once the first scenario has ended (decode-killed
	// then waits out a 10 s lease).
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "scenario publisher-silenced: ") {
				first <- sc.Text()
			}
		}
		close(first)
	}()
	select {
	case line, ok := <-first:
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("bench ended before its first scenario did: %s", out.String())
		}
		t.Log(line)
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("the first scenario did not end")
	}
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("bench did not end after SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(out.String(), "publisher-silenced") {
		t.Fatalf("exit %d; stdout %q: want exit 1 with the finished publisher-silenced row", code, out.String())
	}
}

package faultbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// maxProcOutput bounds what is kept of a child's stdout and of its stderr:
// the lines the bench reads (addresses, workers) come first, and the rest
// is only shown when something fails.
const maxProcOutput = 256 << 10

// proc is a child process (fleet-sim or serve) with the start of its
// output kept.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	err  strings.Builder
	done chan struct{}
}

// startProc runs bin with args until ctx ends or stop is called.
func startProc(ctx context.Context, name, bin string, args ...string) (*proc, error) {
	p := &proc{name: name, cmd: exec.CommandContext(ctx, bin, args...), done: make(chan struct{})}
	// Interrupt first so that serve drains and fleet-sim removes its
	// records; kill if it does not exit within WaitDelay.
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(os.Interrupt) }
	p.cmd.WaitDelay = 10 * time.Second
	p.cmd.Env = append(os.Environ(), "CONTINUUM_CONFIG=")
	so, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	se, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var wg sync.WaitGroup
	for _, pipe := range []struct {
		r io.Reader
		b *strings.Builder
	}{{so, &p.out}, {se, &p.err}} {
		wg.Go(func() {
			sc := bufio.NewScanner(pipe.r)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				p.mu.Lock()
				if pipe.b.Len() < maxProcOutput {
					pipe.b.WriteString(sc.Text())
					pipe.b.WriteByte('\n')
				}
				p.mu.Unlock()
			}
			_, _ = io.Copy(io.Discard, pipe.r) // a line past the scanner's bound
		})
	}
	go func() {
		wg.Wait()
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) stdout() string { p.mu.Lock(); defer p.mu.Unlock(); return p.out.String() }
func (p *proc) stderr() string { p.mu.Lock(); defer p.mu.Unlock(); return p.err.String() }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop interrupts the process and waits for it (killing it after 10 s).
func (p *proc) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// awaitMatch waits until re matches the process's output (stdout or
// stderr) and returns the match's first group.
func (p *proc) awaitMatch(ctx context.Context, re *regexp.Regexp, within time.Duration) (string, error) {
	deadline := time.Now().Add(within)
	for {
		for _, s := range []string{p.stdout(), p.stderr()} {
			if m := re.FindStringSubmatch(s); m != nil {
				return m[1], nil
			}
		}
		if p.exited() {
			return "", fmt.Errorf("%s exited: %s%s", p.name, tail(p.stdout()), tail(p.stderr()))
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s: no %q within %v: %s", p.name, re, within, tail(p.stderr()))
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return "", err
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// errTimeout says a condition did not hold in time.
var errTimeout = errors.New("timed out")

// poll calls cond every interval until it holds (returning when it did),
// or until within has passed.
func poll(ctx context.Context, within, interval time.Duration, cond func() bool) (time.Time, error) {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, errTimeout
		}
		if err := sleep(ctx, interval); err != nil {
			return time.Time{}, err
		}
	}
}

func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}

// Package iostreams carries a command's input and output streams and what is
// known about them: whether they are terminals and whether colour is wanted.
//
// Imports: no internal package.
package iostreams

import (
	"bytes"
	"io"
	"os"
	"sync"

	"golang.org/x/term"
)

// IOStreams is the standard streams of one command invocation.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	stdinTTY  bool
	stdoutTTY bool
	color     bool
}

// System returns the process's standard streams.
func System() *IOStreams {
	outTTY := isTerminal(os.Stdout)
	return &IOStreams{
		In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr,
		stdinTTY:  isTerminal(os.Stdin),
		stdoutTTY: outTTY,
		color:     colorFor(outTTY, os.Getenv),
	}
}

// colorFor decides colour for a terminal or not: off when NO_COLOR is set
// to anything but the empty string (the no-color.org convention) or TERM
// is "dumb".
func colorFor(tty bool, getenv func(string) string) bool {
	return tty && getenv("NO_COLOR") == "" && getenv("TERM") != "dumb"
}

// Test returns streams backed by buffers: no terminal, no colour. Writes are
// serialised, as they are on a real file, since commands write from several
// goroutines (logs, progress); read the buffers once the command is done.
func Test() (ios *IOStreams, in, out, errOut *bytes.Buffer) {
	in, out, errOut = &bytes.Buffer{}, &bytes.Buffer{}, &bytes.Buffer{}
	return &IOStreams{In: in, Out: &lockedWriter{w: out}, ErrOut: &lockedWriter{w: errOut}}, in, out, errOut
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// IsStdinTTY reports whether standard input is a terminal.
func (s *IOStreams) IsStdinTTY() bool { return s.stdinTTY }

// IsStdoutTTY reports whether standard output is a terminal.
func (s *IOStreams) IsStdoutTTY() bool { return s.stdoutTTY }

// ColorEnabled reports whether output may carry ANSI colour: stdout is a
// terminal, NO_COLOR is unset or empty and TERM is not "dumb".
func (s *IOStreams) ColorEnabled() bool { return s.color }

// SetTTY overrides terminal detection (tests).
func (s *IOStreams) SetTTY(stdin, stdout bool) { s.stdinTTY, s.stdoutTTY = stdin, stdout }

// SetColorEnabled overrides colour detection (tests).
func (s *IOStreams) SetColorEnabled(on bool) { s.color = on }

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

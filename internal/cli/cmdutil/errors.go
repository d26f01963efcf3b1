package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Exit codes of the continuum binary. They are mapped in one place, cli.Main.
const (
	ExitOK      = 0
	ExitFailure = 1 // the command ran and failed (validation errors, unreachable source, ...)
	ExitUsage   = 2 // bad flags or arguments, or an input file that cannot be read or parsed
)

// ErrInterrupted ends a command that answers once (discover, kv-inspect
// match) when a signal came before the fleet was read: it exits 1, so that
// a script that cut it short does not take its empty output for the fleet.
// Commands that follow until interrupted end with 0 instead.
var ErrInterrupted = errors.New("interrupted before the fleet was read")

// ExitError carries an exit code; its message, if any, is printed by Main.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Exit returns an error that ends the process with code and prints nothing:
// the command has already said what went wrong.
func Exit(code int) error { return &ExitError{Code: code} }

// FlagErrorf reports a usage error: Main prints it with the usage hint and
// exits with ExitUsage.
func FlagErrorf(format string, args ...any) error {
	return &FlagError{Err: fmt.Errorf(format, args...)}
}

// FlagError is a usage error.
type FlagError struct{ Err error }

func (e *FlagError) Error() string { return e.Err.Error() }
func (e *FlagError) Unwrap() error { return e.Err }

// ExitCode maps an error to the process exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	var fe *FlagError
	if errors.As(err, &fe) {
		return ExitUsage
	}
	return ExitFailure
}

// ErrInputInterrupted ends a command that reads its standard input when a
// signal came before the input ended.
var ErrInputInterrupted = errors.New("interrupted while reading the standard input")

// Interruptible is r read on a goroutine of its own, so that a read left
// waiting on it (a pipe whose writer neither writes nor closes) ends with
// ErrInputInterrupted when ctx ends: the first SIGINT or SIGTERM, which
// only ends the command's context, then ends a command that reads its
// standard input. The goroutine stays blocked in r until the process
// ends; nothing else reads r after it.
func Interruptible(ctx context.Context, r io.Reader) io.Reader {
	if ctx == nil || ctx.Done() == nil {
		return r
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := io.Copy(pw, r)
		_ = pw.CloseWithError(err) // nil: the reader gets io.EOF
	}()
	context.AfterFunc(ctx, func() { _ = pw.CloseWithError(ErrInputInterrupted) })
	return pr
}

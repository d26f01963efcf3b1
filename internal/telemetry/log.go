// Package telemetry sets up structured logging and defines the Prometheus
// metric families with their closed label sets.
//
// Imports: no internal package.
package telemetry

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// LogFormats and LogLevels are the accepted values of --log-format and --log-level.
var (
	LogFormats = []string{"text", "json"}
	LogLevels  = []string{"debug", "info", "warn", "error"}
)

// NewLogger builds the process logger writing to w.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	switch strings.ToLower(level) {
	case "debug":
		lvl = slog.LevelDebug
	case "info", "":
		lvl = slog.LevelInfo
	case "warn", "warning":
		lvl = slog.LevelWarn
	case "error":
		lvl = slog.LevelError
	default:
		return nil, fmt.Errorf("log level %q is not one of %s", level, strings.Join(LogLevels, ", "))
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(format) {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q is not one of %s", format, strings.Join(LogFormats, ", "))
}

// Package cmdutil holds what every command shares: the Factory of
// dependencies, the error types that map to exit codes, and flag helpers.
//
// Imports: config, iostreams and the Kubernetes credential options; never a
// command.
package cmdutil

import (
	"log/slog"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// BuildInfo is set at link time (see the Makefile) or read from the module's
// build information.
type BuildInfo struct {
	Version   string
	Commit    string
	GoVersion string
}

// Factory builds the dependencies commands need, lazily.
type Factory struct {
	IOStreams *iostreams.IOStreams
	Build     BuildInfo
	// ConfigPath is the configuration file chosen by --config, then
	// $CONTINUUM_CONFIG, then ./continuum.yaml if present; "" for none.
	ConfigPath func() string
	// Logger is the process logger configured by --log-level and --log-format.
	Logger func() (*slog.Logger, error)
	// Env resolves ${VAR} references in configuration.
	Env config.LookupEnv
}

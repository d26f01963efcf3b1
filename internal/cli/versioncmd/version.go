// Package versioncmd implements `continuum version`.
//
// Imports: cmdutil only.
package versioncmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
)

// NewCmdVersion returns `continuum version`.
func NewCmdVersion(f *cmdutil.Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(f.IOStreams.Out, Format(f.Build))
			return err
		},
	}
}

// Format renders build information on one line.
func Format(b cmdutil.BuildInfo) string {
	return fmt.Sprintf("continuum %s (commit %s, %s)", b.Version, b.Commit, b.GoVersion)
}

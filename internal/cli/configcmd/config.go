// Package configcmd implements `continuum config validate` and
// `continuum config show`.
//
// Imports: cmdutil, config and iostreams; never another command.
package configcmd

import (
	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
)

// NewCmdConfig returns the `config` command group.
func NewCmdConfig(f *cmdutil.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config <command>",
		Short: "Validate and show Continuum configuration",
		Long: `Validate configuration files the way continuum serve loads them, and show
the effective configuration with defaults filled in and secrets masked.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(NewCmdValidate(f, nil))
	cmd.AddCommand(NewCmdShow(f, nil))
	return cmd
}

// Package configcmd implements `continuum config validate`, `config show`
// and `config diff`.
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
		Short: "Validate, show and compare Continuum configuration",
		Long: `Validate configuration files the way continuum serve loads them, show the
effective configuration with defaults filled in and secrets masked, and show
what reloading one configuration over another would do.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(NewCmdValidate(f, nil))
	cmd.AddCommand(NewCmdShow(f, nil))
	cmd.AddCommand(NewCmdDiff(f, nil))
	return cmd
}

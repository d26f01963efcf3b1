package cmdutil

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// OneOf checks that a flag's value is one of allowed.
func OneOf(flag, value string, allowed []string) error {
	if slices.Contains(allowed, value) {
		return nil
	}
	return FlagErrorf("%s %q is not one of %s", flag, value, strings.Join(allowed, ", "))
}

// RegisterEnumCompletion completes a flag from a fixed list of values.
func RegisterEnumCompletion(cmd *cobra.Command, flag string, values []string) {
	_ = cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
}

package cmdutil

import (
	"net/url"
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

// HTTPBaseURL checks that a flag holds an http(s) base URL with a host, such
// as http://router:8080: a bare host:port or another scheme is a usage
// error told as such, not a request error after the command has started.
func HTTPBaseURL(flag, value string) error {
	u, err := url.Parse(value)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		example := "http://router:8080"
		if value != "" && !strings.Contains(value, "://") {
			example = "http://" + strings.TrimPrefix(value, "//")
		}
		return FlagErrorf("%s %q: give an http(s) URL, such as %s", flag, value, example)
	}
	return nil
}

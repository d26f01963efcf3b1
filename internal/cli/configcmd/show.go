package configcmd

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// ShowOptions are the parsed flags and dependencies of `config show`.
type ShowOptions struct {
	IO     *iostreams.IOStreams
	Env    config.LookupEnv
	File   string
	Output string
}

var showFormats = []string{"yaml", "json"}

// NewCmdShow returns `config show`. runF replaces the run step in tests.
func NewCmdShow(f *cmdutil.Factory, runF func(*ShowOptions) error) *cobra.Command {
	opts := &ShowOptions{IO: f.IOStreams, Env: f.Env}
	cmd := &cobra.Command{
		Use:   "show [FILE]",
		Short: "Print the effective configuration, secrets masked",
		Long: `Print the effective configuration: the defaults, then FILE (or the file
given by --config or CONTINUUM_CONFIG), with ${VAR} references resolved.
Secrets (etcd client_key and auth.password, backend api_key, admin token,
the server's and the event bus's TLS keys) are masked (a file holding the
mask as a secret is refused); certificates are shown as they are. Without a
configuration file, the defaults are shown.

A file with validation errors is not shown: its findings are printed instead
and the exit status is 1.`,
		Example: `  continuum config show continuum.yaml
  continuum config show --config continuum.yaml -o json | jq .dynamo.discovery`,
		Args: cobra.MaximumNArgs(1),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return []string{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			// A FILE argument names the file as config validate's does;
			// without one, --config, CONTINUUM_CONFIG or ./continuum.yaml.
			if len(args) == 1 {
				opts.File = args[0]
			} else {
				opts.File = f.ConfigPath()
			}
			if err := cmdutil.OneOf("--output", opts.Output, showFormats); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return showRun(opts)
		},
	}
	cmd.Flags().StringVarP(&opts.Output, "output", "o", "yaml", "output format: yaml or json")
	cmdutil.RegisterEnumCompletion(cmd, "output", showFormats)
	return cmd
}

func showRun(opts *ShowOptions) error {
	cfg := config.DefaultFor(opts.Env)
	if opts.File != "" {
		doc, err := config.Load(opts.File, config.Options{Env: opts.Env})
		if err != nil {
			return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: fmt.Errorf("%s: %s", opts.File, describeUnreadable(opts.File, err))}
		}
		if doc.Findings.Errors() > 0 {
			for _, f := range doc.Findings {
				if f.Severity == config.SeverityError {
					_, _ = fmt.Fprintln(opts.IO.ErrOut, f.String())
				}
			}
			return &cmdutil.ExitError{Code: cmdutil.ExitFailure, Err: fmt.Errorf("%s has %s (above): it shows the configuration a router would run, with the variables it names set as where the router runs", opts.File, doc.Findings.ErrorCount())}
		}
		cfg = doc.Config
	}
	masked := cfg.Masked()
	if opts.Output == "json" {
		enc := json.NewEncoder(opts.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(masked)
	}
	enc := yaml.NewEncoder(opts.IO.Out)
	enc.SetIndent(2)
	if err := enc.Encode(masked); err != nil {
		return err
	}
	return enc.Close()
}

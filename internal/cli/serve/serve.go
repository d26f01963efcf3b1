// Package serve implements `continuum serve` over the router process in
// internal/routerd.
package serve

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/gcpolicy"
	"github.com/continuum-router/continuum/internal/routerd"
)

// Options are the parsed flags and dependencies of `serve`.
type Options = routerd.Options

// NewCmdServe returns `continuum serve`. runF replaces the run step in tests.
func NewCmdServe(f *cmdutil.Factory, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Env: f.Env, Logger: f.Logger}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the router",
		Long: `Run the OpenAI-compatible router (chat and text completions, models, health,
readiness, metrics and the admin API) over the configured backends.

With dynamo.enabled, the router discovers the Dynamo fleet, follows every
worker's kv_metrics load, picks a prefill and a decode worker per request
and dispatches through the dynamo.frontend --router-mode direct replicas of
dynamo.shim with x-dynamo-* pin headers.

On SIGTERM or SIGINT the router stops being ready, drains in-flight requests
for --shutdown-grace, then stops discovery and subscriptions.

Unless GOGC is set, the router runs its garbage collector at GOGC=400 (its
live heap is small and collections cost tail latency), with a soft memory
limit of 80% of the container's memory limit unless GOMEMLIMIT is set.`,
		Example: `  continuum serve --demo
  continuum serve --config continuum.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.ConfigFile = f.ConfigPath()
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			// The serving process collects garbage less often.
			logger, _ := opts.Logger()
			defer gcpolicy.Apply(opts.Env, logger)()
			return Run(cmd.Context(), opts)
		},
	}
	cmd.Flags().DurationVar(&opts.Grace, "shutdown-grace", 30*time.Second, "how long in-flight requests may take to finish at shutdown")
	cmd.Flags().StringVar(&opts.Bind, "bind", "", "listen address, overriding server.bind_address")
	cmd.Flags().BoolVar(&opts.Demo, "demo", false, "start a simulated Dynamo fleet in-process and route to it (no --config needed)")
	return cmd
}

// Run serves until ctx ends; configuration errors exit with the usage code.
func Run(ctx context.Context, o *Options) error {
	err := routerd.Run(ctx, o)
	var ce *routerd.ConfigError
	if errors.As(err, &ce) {
		return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: ce.Err}
	}
	return err
}

// Package cli is the continuum command tree: the root command, its global
// flags, and the one place where errors become exit codes.
//
// Imports: its commands, cmdutil, iostreams and telemetry.
package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/cli/benchcmd"
	"github.com/continuum-router/continuum/internal/cli/broker"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/cli/configcmd"
	"github.com/continuum-router/continuum/internal/cli/discover"
	"github.com/continuum-router/continuum/internal/cli/fleetsimcmd"
	"github.com/continuum-router/continuum/internal/cli/kvinspect"
	"github.com/continuum-router/continuum/internal/cli/kvlistener"
	"github.com/continuum-router/continuum/internal/cli/pinartifact"
	"github.com/continuum-router/continuum/internal/cli/serve"
	"github.com/continuum-router/continuum/internal/cli/tailload"
	"github.com/continuum-router/continuum/internal/cli/top"
	"github.com/continuum-router/continuum/internal/cli/versioncmd"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/telemetry"
)

// Set by the linker: -X github.com/continuum-router/continuum/internal/cli.version=...
var (
	version string
	commit  string
)

// DefaultConfigFile is read when neither --config nor CONTINUUM_CONFIG is given.
const DefaultConfigFile = "continuum.yaml"

// globalFlags are the root's persistent flags.
type globalFlags struct {
	configFile string
	logLevel   string
	logFormat  string
}

// NewRootCmd builds the command tree over f. The returned Factory closures
// read the global flags once they are parsed.
func NewRootCmd(f *cmdutil.Factory) *cobra.Command {
	g := &globalFlags{}
	f.ConfigPath = func() string {
		if g.configFile != "" {
			return g.configFile
		}
		if p := os.Getenv("CONTINUUM_CONFIG"); p != "" {
			return p
		}
		if _, err := os.Stat(DefaultConfigFile); err == nil {
			return DefaultConfigFile
		}
		return ""
	}
	f.Logger = func() (*slog.Logger, error) {
		return telemetry.NewLogger(f.IOStreams.ErrOut, g.logLevel, g.logFormat)
	}
	root := &cobra.Command{
		Use:   "continuum",
		Short: "Router and toolkit for NVIDIA Dynamo inference fleets",
		Long: `Continuum routes OpenAI-compatible traffic to NVIDIA Dynamo inference fleets.
It discovers workers (etcd, Dynamo's file store, Kubernetes), follows their
live load and KV-cache events, picks a prefill and a decode worker for each
request, and dispatches through dynamo.frontend --router-mode direct.

The same binary carries the tools to operate it: discover the fleet, tail
load frames, inspect KV hashing, pin artifacts, and validate configuration.`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		DisableAutoGenTag: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := cmdutil.OneOf("--log-level", g.logLevel, telemetry.LogLevels); err != nil {
				return err
			}
			if err := cmdutil.OneOf("--log-format", g.logFormat, telemetry.LogFormats); err != nil {
				return err
			}
			return durations(cmd)
		},
	}
	root.SetIn(f.IOStreams.In)
	root.SetOut(f.IOStreams.Out)
	root.SetErr(f.IOStreams.ErrOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &cmdutil.FlagError{Err: err} })

	pf := root.PersistentFlags()
	pf.StringVar(&g.configFile, "config", "", "configuration file (default $CONTINUUM_CONFIG, else ./continuum.yaml if present)")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	pf.StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	cmdutil.RegisterEnumCompletion(root, "log-level", telemetry.LogLevels)
	cmdutil.RegisterEnumCompletion(root, "log-format", telemetry.LogFormats)
	_ = root.MarkPersistentFlagFilename("config", "yaml", "yml")

	root.AddGroup(
		&cobra.Group{ID: "operate", Title: "Operate a fleet:"},
		&cobra.Group{ID: "configure", Title: "Configure:"},
	)
	disc := discover.NewCmdDiscover(f, nil)
	disc.GroupID = "operate"
	root.AddCommand(disc)
	brk := broker.NewCmdBroker(f, nil)
	brk.GroupID = "operate"
	root.AddCommand(brk)
	kvl := kvlistener.NewCmdKVListener(f, nil)
	kvl.GroupID = "operate"
	root.AddCommand(kvl)
	bench := benchcmd.NewCmdBench(f)
	bench.GroupID = "operate"
	root.AddCommand(bench)
	sim := fleetsimcmd.NewCmdFleetSim(f, nil)
	sim.GroupID = "operate"
	root.AddCommand(sim)
	sv := serve.NewCmdServe(f, nil)
	sv.GroupID = "operate"
	root.AddCommand(sv)
	tail := tailload.NewCmdTailLoad(f, nil)
	tail.GroupID = "operate"
	root.AddCommand(tail)
	tp := top.NewCmdTop(f, nil)
	tp.GroupID = "operate"
	root.AddCommand(tp)
	pin := pinartifact.NewCmdPinArtifact(f, nil)
	kvi := kvinspect.NewCmdKVInspect(f)
	kvi.GroupID = "operate"
	root.AddCommand(kvi)
	pin.GroupID = "configure"
	root.AddCommand(pin)
	cfg := configcmd.NewCmdConfig(f)
	cfg.GroupID = "configure"
	root.AddCommand(cfg)
	root.AddCommand(versioncmd.NewCmdVersion(f))
	root.Version = versioncmd.Format(f.Build)
	root.SetVersionTemplate("{{.Version}}\n")
	root.InitDefaultCompletionCmd() // now, so that usageErrors sees it
	root.SetHelpCommand(helpCommand(root))
	usageErrors(root)
	return root
}

// helpCommand is `help [command]`: cobra's own shows the root's help for a
// topic it does not know and exits 0, so a typo in a scripted help lookup
// (`continuum help config valdate`) would pass; here it is a usage error,
// as the same words without help are.
func helpCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "Help shows the help of any command: continuum help [path to command].",
		ValidArgsFunction: func(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cmd, _, err := root.Find(args)
			if err != nil || cmd == nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []cobra.Completion
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					names = append(names, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(_ *cobra.Command, args []string) error {
			cmd, rest, err := root.Find(args)
			if err == nil && len(rest) > 0 {
				err = fmt.Errorf("unknown command %q for %q", rest[0], cmd.CommandPath())
			}
			if err != nil || cmd == nil {
				return &cmdutil.FlagError{Err: fmt.Errorf("unknown help topic %q: %w", strings.Join(args, " "), err)}
			}
			cmd.InitDefaultHelpFlag()
			cmd.InitDefaultVersionFlag()
			return cmd.Help()
		},
	}
}

// durations refuses a duration flag set below zero (every duration a
// command takes is a wait, an interval or a bound), and a timeout or grace
// set to zero where zero is not its default (it would give up at once).
func durations(cmd *cobra.Command) error {
	var err error
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		if err != nil || fl.Value.Type() != "duration" {
			return
		}
		d, perr := time.ParseDuration(fl.Value.String())
		if perr != nil {
			return
		}
		bound := fl.Name == "timeout" || fl.Name == "shutdown-grace"
		if d < 0 || d == 0 && bound && fl.DefValue != "0s" {
			err = &cmdutil.FlagError{Err: fmt.Errorf("--%s %v: give a positive duration, such as %s", fl.Name, fl.Value, positiveExample(fl.DefValue))}
		}
	})
	return err
}

// positiveExample is a flag's default when it is positive, else 30s.
func positiveExample(def string) string {
	if d, err := time.ParseDuration(def); err == nil && d > 0 {
		return def
	}
	return "30s"
}

// usageErrors makes every wrong command line a usage error (exit 2, with a
// pointer to --help): an argument count a command's Args refuses, and a
// word after a command group that is none of its subcommands (cobra shows
// a group's help for any arguments, so `config valdate x.yaml` would
// otherwise exit 0 without validating anything).
func usageErrors(c *cobra.Command) {
	if args := c.Args; args != nil {
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return &cmdutil.FlagError{Err: err}
			}
			return nil
		}
	}
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = func(cmd *cobra.Command, a []string) error {
			if len(a) > 0 {
				return &cmdutil.FlagError{Err: fmt.Errorf("unknown command %q for %q", a[0], cmd.CommandPath())}
			}
			return nil
		}
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
	for _, sub := range c.Commands() {
		usageErrors(sub)
	}
}

// Build returns the build information of this binary.
func Build() cmdutil.BuildInfo {
	b := cmdutil.BuildInfo{Version: version, Commit: commit, GoVersion: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" {
			b.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && b.Commit == "" {
				b.Commit = s.Value
			}
		}
	}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

// Main runs the command line and returns the process exit code.
func Main() int {
	ios := iostreams.System()
	f := &cmdutil.Factory{IOStreams: ios, Build: Build(), Env: os.LookupEnv}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first SIGINT or SIGTERM asks the command to stop (serve drains
	// its requests for --shutdown-grace); a second one ends the process at
	// once, as the signal's default does.
	context.AfterFunc(ctx, stop)
	return Run(ctx, f, os.Args[1:])
}

// Run executes args against a fresh command tree and maps the outcome to an
// exit code, printing the error if the command has not.
func Run(ctx context.Context, f *cmdutil.Factory, args []string) int {
	root := NewRootCmd(f)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return cmdutil.ExitOK
	}
	if msg := err.Error(); strings.HasPrefix(msg, "unknown command ") || strings.HasPrefix(msg, "required flag(s) ") {
		err = &cmdutil.FlagError{Err: err} // cobra's own usage errors
	}
	var ee *cmdutil.ExitError
	var fe *cmdutil.FlagError
	jsonLogs := cmdutil.JSONLogs(root)
	switch {
	case errors.As(err, &ee) && ee.Err == nil:
		// The command has reported already.
	case jsonLogs:
		// Logs read as JSON lines (a Kubernetes log pipeline) get the
		// error as one too, like every other line the process wrote.
		attrs := []any{"command", commandPath(root, args), "err", err.Error(), "exit_code", cmdutil.ExitCode(err)}
		if errors.As(err, &fe) {
			attrs = append(attrs, "usage", true)
		}
		slog.New(slog.NewJSONHandler(f.IOStreams.ErrOut, nil)).Error("command failed", attrs...)
	case errors.As(err, &fe):
		_, _ = fmt.Fprintf(f.IOStreams.ErrOut, "error: %v\nRun '%s --help' for usage.\n", err, commandPath(root, args))
	default:
		_, _ = fmt.Fprintf(f.IOStreams.ErrOut, "error: %v\n", err)
	}
	return cmdutil.ExitCode(err)
}

func commandPath(root *cobra.Command, args []string) string {
	if c, _, err := root.Find(args); err == nil && c != nil {
		return c.CommandPath()
	}
	return root.CommandPath()
}

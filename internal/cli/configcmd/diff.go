package configcmd

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// DiffOptions are the parsed flags and dependencies of `config diff`.
type DiffOptions struct {
	IO       *iostreams.IOStreams
	Env      config.LookupEnv
	Old, New string
	Format   string
}

var diffFormats = []string{"text", "json"}

// NewCmdDiff returns `config diff`. runF replaces the run step in tests.
func NewCmdDiff(f *cmdutil.Factory, runF func(*DiffOptions) error) *cobra.Command {
	opts := &DiffOptions{IO: f.IOStreams, Env: f.Env}
	cmd := &cobra.Command{
		Use:   "diff OLD NEW",
		Short: "Show what reloading from OLD to NEW would do, tier by tier",
		Long: `Show what a running router configured with OLD would do on reloading NEW:
every changed key, grouped by how it takes effect.

    immediate             read at the next request or freshness check
    subscription_restart  load and kv-events subscriptions restart through the
                          new transport policy (samples and KV cursors kept)
    watcher_restart       the discovery watcher is replaced; the reason says
                          what happens to the fleet view meanwhile (backoff:
                          kept until the new watcher's first resync;
                          namespaces: the removed namespaces are pruned, the
                          rest kept; any other: emptied until the resync)
    rebind                a listener moves to its new address; the old one
                          drains its open connections

Values are never printed, so secrets stay out of CI logs.

Exit status: 0 when NEW would be applied, 1 when a reload would refuse it
(NEW has errors; they are printed), 2 when a file cannot be read.`,
		Example: `  continuum config diff deploy/continuum.yaml continuum.new.yaml
  continuum config diff --format json old.yaml new.yaml | jq .watcher`,
		Args: cobra.ExactArgs(2),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return []string{"yaml", "yml", "json"}, cobra.ShellCompDirectiveFilterFileExt
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Old, opts.New = args[0], args[1]
			if err := cmdutil.OneOf("--format", opts.Format, diffFormats); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return diffRun(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Format, "format", "text", "output format: text or json")
	cmdutil.RegisterEnumCompletion(cmd, "format", diffFormats)
	return cmd
}

// jsonDiff is `config diff --format json`.
type jsonDiff struct {
	// Applied is false when a reload would refuse NEW; Errors say why.
	Applied bool     `json:"applied"`
	Errors  []string `json:"errors"`
	// Tiers lists the changed keys by tier, in order from the lightest.
	Tiers                []jsonTier   `json:"tiers"`
	RestartSubscriptions bool         `json:"restart_subscriptions"`
	Watcher              *jsonWatcher `json:"watcher"`
}

type jsonTier struct {
	Tier string   `json:"tier"`
	Keys []string `json:"keys"`
}

type jsonWatcher struct {
	Reason        string   `json:"reason"`
	CountsRestart bool     `json:"counts_restart"`
	KeepsSnapshot bool     `json:"keeps_snapshot"`
	Prunes        []string `json:"prunes"`
}

func diffRun(opts *DiffOptions) error {
	load := func(file string) (*config.Document, error) {
		// A ${VAR} that is not set here (CI holds none of the router's
		// secrets) leaves its key at the default in both files, as
		// config validate judges the file rather than this machine.
		doc, err := config.Load(file, config.Options{Env: opts.Env, UnsetEnvWarns: true})
		if err != nil {
			return nil, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: fmt.Errorf("%s: %s", file, describeUnreadable(file, err))}
		}
		return doc, nil
	}
	oldDoc, err := load(opts.Old)
	if err != nil {
		return err
	}
	newDoc, err := load(opts.New)
	if err != nil {
		return err
	}
	if oldDoc.Findings.Errors() > 0 {
		return &cmdutil.ExitError{Code: cmdutil.ExitFailure, Err: fmt.Errorf("%s has %s: no router runs it; run continuum config validate %s", opts.Old, oldDoc.Findings.ErrorCount(), opts.Old)}
	}
	out := jsonDiff{Applied: newDoc.Findings.Errors() == 0, Errors: []string{}, Tiers: []jsonTier{}}
	for _, f := range newDoc.Findings {
		if f.Severity == config.SeverityError {
			out.Errors = append(out.Errors, f.String())
		}
	}
	// A file that holds no configuration (blank, comments, a bare ---)
	// loads as every default, but no reload applies it: the file watch
	// waits for its write, SIGHUP and PUT /admin/config refuse it.
	empty := false
	if data, err := config.ReadFile(opts.New, config.MaxFileBytes); err == nil && config.Empty(data) {
		empty, out.Applied = true, false
		out.Errors = append(out.Errors, opts.New+": the file holds no configuration (a reload never applies an empty document as every default)")
	}
	plan := config.Diff(oldDoc.Config, newDoc.Config)
	if empty {
		plan = config.Plan{} // no fix of an empty file reverts every key to its default
	}
	for _, tier := range []config.Tier{config.TierImmediate, config.TierSubscriptionRestart, config.TierWatcherRestart, config.TierRebind} {
		t := jsonTier{Tier: tier.String()}
		for _, ch := range plan.Changes {
			if ch.Tier == tier {
				t.Keys = append(t.Keys, ch.Path)
			}
		}
		if len(t.Keys) > 0 {
			out.Tiers = append(out.Tiers, t)
		}
	}
	out.RestartSubscriptions = plan.RestartSubscriptions
	if w := plan.Watcher; w != nil {
		out.Watcher = &jsonWatcher{Reason: w.Reason, CountsRestart: w.CountRestart, KeepsSnapshot: w.KeepSnapshot, Prunes: w.Prune}
		if out.Watcher.Prunes == nil {
			out.Watcher.Prunes = []string{}
		}
	}
	if opts.Format == "json" {
		enc := json.NewEncoder(opts.IO.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else if err := writeDiff(opts.IO.Out, out); err != nil {
		return err
	}
	if !out.Applied {
		return &cmdutil.ExitError{Code: cmdutil.ExitFailure, Err: fmt.Errorf("a reload would refuse %s: %d errors", opts.New, len(out.Errors))}
	}
	return nil
}

func writeDiff(w io.Writer, d jsonDiff) error {
	var b strings.Builder
	if !d.Applied {
		b.WriteString("A reload would refuse NEW and keep the running configuration:\n")
		for _, e := range d.Errors {
			fmt.Fprintf(&b, "  %s\n", e)
		}
		if len(d.Tiers) > 0 {
			b.WriteString("Once fixed, it would change:\n")
		}
	}
	if len(d.Tiers) == 0 {
		b.WriteString("No changes: a reload would apply nothing.\n")
	}
	for _, t := range d.Tiers {
		b.WriteString(t.Tier)
		if t.Tier == config.TierWatcherRestart.String() && d.Watcher != nil {
			fmt.Fprintf(&b, " (reason %s: %s)", d.Watcher.Reason, watcherEffect(d.Watcher))
		}
		b.WriteString(":\n")
		for _, k := range t.Keys {
			fmt.Fprintf(&b, "  %s\n", k)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// watcherEffect says what a watcher replacement does to the fleet view.
func watcherEffect(w *jsonWatcher) string {
	switch {
	case w.KeepsSnapshot:
		return "the fleet view is kept until the new watcher's first resync"
	case w.Reason == config.ReasonNamespaces && len(w.Prunes) > 0:
		return "namespaces " + strings.Join(w.Prunes, ", ") + " are pruned, the others kept"
	case w.Reason == config.ReasonNamespaces:
		return "the fleet view is kept; the new namespaces join at the resync"
	case !w.CountsRestart:
		return "discovery stops and the fleet view is emptied"
	}
	return "the fleet view is emptied until the new watcher's first resync"
}

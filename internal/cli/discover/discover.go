// Package discover implements `continuum discover`: a one-shot (or watched)
// dump of the fleet a discovery source sees, with the reasons records were
// rejected.
//
// Imports: cmdutil and engines (discovery sources, fleet, admin views); never
// another command.
package discover

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/sources"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// Options are the parsed flags and dependencies of `discover`.
type Options struct {
	IO         *iostreams.IOStreams
	Env        config.LookupEnv
	Logger     func() (*slog.Logger, error)
	ConfigFile string

	Discovery cmdutil.DiscoveryFlags
	Output    string
	Watch     bool
	Timeout   time.Duration
}

var outputs = []string{"table", "json", "yaml"}

// NewCmdDiscover returns `continuum discover`. runF replaces the run step in tests.
func NewCmdDiscover(f *cmdutil.Factory, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Env: f.Env, Logger: f.Logger}
	cmd := &cobra.Command{
		Use:   "discover",
		Short: "Show the Dynamo fleet a discovery source sees, and why records were rejected",
		Long: `Connect to the discovery source, read the fleet once and print it: workers by
namespace and model with their roles, data-parallel ranks and capacity, the
event publishers, and the problems that explain why a record is not a
routable worker (duplicates, role conflicts, malformed or oversized records).

The source comes from --config, and flags override it: etcd, Dynamo's file
store, or on Kubernetes the DynamoWorkerMetadata resources joined with their
EndpointSlices (--source kubernetes) or the operator's pod labels alone
(--source kubernetes_pods, with --model or --models). Kubernetes credentials
are in-cluster first, then KUBECONFIG or ~/.kube/config, or --kubeconfig and
--context. With --watch, changes (added, removed, updated) are printed with
their generation until interrupted: a line each, one JSON object a line with
-o json (the first report too, on one line), one more YAML document each with
-o yaml.

Exit status 1 when the source cannot be reached within --timeout (at once
for a mistake no retry mends: a --file-root that is a file, a kubeconfig
that cannot be read or names no cluster), or when a signal ends a one-shot
discover before the fleet was read.`,
		Example: `  continuum discover --etcd-endpoints http://etcd.dynamo.svc:2379 --namespace dynamo
  continuum discover --source file --file-root /tmp/dynamo_store_kv -o json
  continuum discover --config continuum.yaml --watch
  continuum discover --source kubernetes --kube-namespace dynamo --dynamo-namespace dynamo-qwen3
  continuum discover --source kubernetes_pods --kube-namespace dynamo --dynamo-namespace dynamo-qwen3 --models VllmDecodeWorker=qwen3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.ConfigFile = f.ConfigPath()
			if err := cmdutil.OneOf("--output", opts.Output, outputs); err != nil {
				return err
			}
			opts.Discovery.Capture(cmd.Flags())
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return Run(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	opts.Discovery.Register(cmd)
	fl.StringVarP(&opts.Output, "output", "o", "table", "output format: table, json or yaml")
	fl.BoolVarP(&opts.Watch, "watch", "w", false, "keep watching and print changes until interrupted")
	fl.DurationVar(&opts.Timeout, "timeout", discovery.SeedTimeout, "how long to wait for the first complete read")
	cmdutil.RegisterEnumCompletion(cmd, "output", outputs)
	return cmd
}

// Report is the JSON (and YAML) shape of one fleet dump.
type Report struct {
	Source     string            `json:"source"`
	Namespaces []string          `json:"namespaces"`
	Generation uint64            `json:"generation"`
	Workers    []admin.Worker    `json:"workers"`
	Publishers []admin.Publisher `json:"publishers"`
	Problems   []admin.Problem   `json:"problems"`
}

// Run connects, prints the fleet and, with --watch, follows it.
func Run(ctx context.Context, o *Options) error {
	cfg, err := o.Discovery.Resolve(o.ConfigFile, o.Env)
	if err != nil {
		return err
	}
	logger, err := o.Logger()
	if err != nil {
		return err
	}
	d := &cfg.Dynamo.Discovery
	fl, err := sources.Open(ctx, d, o.Discovery.KubeClient(), logger, o.Timeout)
	if err != nil {
		if ctx.Err() != nil {
			if o.Watch {
				return nil // interrupted: a watch ends so
			}
			return cmdutil.ErrInterrupted
		}
		return err
	}
	defer fl.Close()
	reg, gen := fl.Registry, fl.Generation
	snap := reg.Snapshot()
	report := buildReport(fl.Source, d.Namespaces(), gen, snap)
	if err := o.print(report); err != nil {
		return err
	}
	if !o.Watch {
		return nil
	}
	for {
		next, err := reg.Wait(ctx, gen)
		if err != nil {
			return nil
		}
		cur := reg.Snapshot()
		if err := o.printChanges(next, snap, cur); err != nil {
			return err
		}
		gen, snap = next, cur
	}
}

func buildReport(source string, namespaces []string, gen uint64, snap *fleet.Snapshot) Report {
	r := Report{Source: source, Namespaces: namespaces, Generation: gen}
	if r.Namespaces == nil {
		r.Namespaces = []string{}
	}
	r.Workers, r.Publishers, r.Problems = admin.Views(snap)
	return r
}

func (o *Options) print(r Report) error {
	switch o.Output {
	case "json":
		enc := json.NewEncoder(o.IO.Out)
		if !o.Watch {
			enc.SetIndent("", "  ")
		}
		// With --watch the report is the first line of a JSON Lines
		// stream, so that a reader taking a line at a time parses each.
		return enc.Encode(r)
	case "yaml":
		return writeYAML(o.IO.Out, r)
	}
	return writeTable(o.IO.Out, r, time.Now())
}

// writeYAML renders r through its JSON form, so field names and order match.
func writeYAML(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return err
	}
	blockStyle(&n)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return err
	}
	return enc.Close()
}

func blockStyle(n *yaml.Node) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style = 0
	}
	if n.Kind == yaml.ScalarNode && n.Style == yaml.DoubleQuotedStyle {
		n.Style = 0
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}

func dash(p *uint64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func age(since string, now time.Time) string {
	t, err := time.Parse(admin.TimeFormat, since)
	if err != nil {
		return "-"
	}
	d := now.Sub(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// writeTable prints r for a terminal; every string read from the fleet goes
// through iostreams.Printable (pr), so none can drive the terminal or break a
// row.
func writeTable(out io.Writer, r Report, now time.Time) error {
	pr := iostreams.Printable
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "source %s, namespaces %s, generation %d: %d workers, %d publishers, %d problems\n\n",
		r.Source, pr(strings.Join(r.Namespaces, ",")), r.Generation, len(r.Workers), len(r.Publishers), len(r.Problems))
	if len(r.Workers) > 0 {
		fmt.Fprintln(tw, "NAMESPACE\tMODEL\tROLE\tINSTANCE\tWORKER_ID\tDP_RANKS\tBLOCK\tKV_BLOCKS\tBATCH_TOKENS\tAGE")
		for _, w := range r.Workers {
			ranks := fmt.Sprint(w.DPStartRank)
			if w.DPSize > 1 {
				ranks = fmt.Sprintf("%d-%d", w.DPStartRank, w.DPStartRank+w.DPSize-1)
			}
			block := "-"
			if w.BlockSize != nil {
				block = fmt.Sprint(*w.BlockSize)
			}
			model := w.Model
			if model == "" {
				model = "(no card)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", pr(w.Namespace), pr(model), w.Role, w.InstanceID, w.WorkerID,
				ranks, block, dash(w.Capacity.TotalKVBlocks), dash(w.Capacity.MaxNumBatchedTokens), age(w.FirstSeen, now))
		}
		fmt.Fprintln(tw)
	}
	if len(r.Publishers) > 0 {
		fmt.Fprintln(tw, "NAMESPACE\tCOMPONENT\tTOPIC\tPUBLISHER_ID")
		for _, p := range r.Publishers {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", pr(p.Namespace), pr(p.Component), pr(p.Topic), p.PublisherID)
		}
		fmt.Fprintln(tw)
	}
	if len(r.Problems) > 0 {
		fmt.Fprintln(tw, "PROBLEM\tKEYS\tREASON")
		for _, p := range r.Problems {
			keys := strings.Join(p.Keys, " ")
			if p.KeyCount > len(p.Keys) {
				keys += fmt.Sprintf(" (+%d more)", p.KeyCount-len(p.Keys))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Kind, pr(keys), pr(p.Reason))
		}
	}
	return tw.Flush()
}

// Change is one --watch change in JSON (and YAML).
type Change struct {
	Generation uint64           `json:"generation"`
	Event      string           `json:"event"`
	Worker     *admin.Worker    `json:"worker,omitempty"`
	Publisher  *admin.Publisher `json:"publisher,omitempty"`
	Problem    *admin.Problem   `json:"problem,omitempty"`
}

func (o *Options) printChanges(gen uint64, before, after *fleet.Snapshot) error {
	var changes []Change
	for w := range after.Workers.All() {
		v := admin.WorkerView(w)
		prev := before.Workers.Get(w.ID)
		switch {
		case prev == nil:
			changes = append(changes, Change{Generation: gen, Event: "added", Worker: &v})
		case !sameWorker(admin.WorkerView(prev), v):
			changes = append(changes, Change{Generation: gen, Event: "updated", Worker: &v})
		}
	}
	for w := range before.Workers.All() {
		if after.Workers.Get(w.ID) == nil {
			v := admin.WorkerView(w)
			changes = append(changes, Change{Generation: gen, Event: "removed", Worker: &v})
		}
	}
	oldPubs := map[string]bool{}
	for p := range before.Publishers.All() {
		oldPubs[p.Key] = true
	}
	newPubs := map[string]bool{}
	for p := range after.Publishers.All() {
		newPubs[p.Key] = true
		if !oldPubs[p.Key] {
			v := admin.PublisherView(p)
			changes = append(changes, Change{Generation: gen, Event: "publisher_added", Publisher: &v})
		}
	}
	for p := range before.Publishers.All() {
		if !newPubs[p.Key] {
			v := admin.PublisherView(p)
			changes = append(changes, Change{Generation: gen, Event: "publisher_removed", Publisher: &v})
		}
	}
	// A problem is told apart by all it says and by its whole key set: a
	// conflict whose keys change beyond the few it names is a new conflict
	// (the registry logs and counts it again), and is printed as one.
	problemID := func(p fleet.Problem) string {
		return fmt.Sprintf("%s\x00%s\x00%d\x00%x\x00%s", p.Kind, strings.Join(p.Keys, ","), p.KeyCount, p.KeySet(), p.Reason)
	}
	oldProblems, newProblems := map[string]bool{}, map[string]bool{}
	for _, p := range before.Problems {
		oldProblems[problemID(p)] = true
	}
	for _, p := range after.Problems {
		newProblems[problemID(p)] = true
		if !oldProblems[problemID(p)] {
			v := admin.ProblemView(p)
			changes = append(changes, Change{Generation: gen, Event: "problem", Problem: &v})
		}
	}
	for _, p := range before.Problems {
		if !newProblems[problemID(p)] {
			v := admin.ProblemView(p)
			changes = append(changes, Change{Generation: gen, Event: "problem_cleared", Problem: &v})
		}
	}
	for _, c := range changes {
		if err := o.printChange(c); err != nil {
			return err
		}
	}
	return nil
}

func sameWorker(a, b admin.Worker) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func (o *Options) printChange(c Change) error {
	if o.Output == "yaml" {
		// One more document of the stream the first report began.
		if _, err := io.WriteString(o.IO.Out, "---\n"); err != nil {
			return err
		}
		return writeYAML(o.IO.Out, c)
	}
	if o.Output != "table" {
		b, err := json.Marshal(c)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.IO.Out, "%s\n", b)
		return err
	}
	pr := iostreams.Printable // fleet strings, as in writeTable
	if c.Problem != nil {
		_, err := fmt.Fprintf(o.IO.Out, "gen %d  %s  %s  %s: %s\n", c.Generation, c.Event, c.Problem.Kind, pr(strings.Join(c.Problem.Keys, " ")), pr(c.Problem.Reason))
		return err
	}
	if p := c.Publisher; p != nil {
		_, err := fmt.Fprintf(o.IO.Out, "gen %d  %s  %s/%s  %s  publisher_id=%s\n", c.Generation, c.Event, pr(p.Namespace), pr(p.Component), pr(p.Topic), p.PublisherID)
		return err
	}
	w := c.Worker
	_, err := fmt.Fprintf(o.IO.Out, "gen %d  %-7s  %s/%s  %s  %s  worker_id=%s\n", c.Generation, c.Event, pr(w.Namespace), w.InstanceID, w.Role, pr(w.Model), w.WorkerID)
	return err
}

// Package pinartifact implements `continuum pin-artifact`: the blake3
// checksums an operator pins in dynamo.kv.pinned_artifacts after reviewing
// a fleet's tokenizer and chat-template files, and the list of what a live
// fleet's cards declare.
//
// Imports: cmdutil and engines (artifact, discovery sources, fleet); never
// another command.
package pinartifact

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/sources"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// Options are the parsed flags and dependencies of `pin-artifact`.
type Options struct {
	IO         *iostreams.IOStreams
	Env        config.LookupEnv
	Logger     func() (*slog.Logger, error)
	ConfigFile string
	// Client fetches http(s):// and hf:// inputs (default http.DefaultClient).
	Client *http.Client

	Inputs        []string
	YAML          bool
	JSON          bool
	FromDiscovery bool
	Discovery     cmdutil.DiscoveryFlags
	Timeout       time.Duration
}

// NewCmdPinArtifact returns `continuum pin-artifact`. runF replaces the run
// step in tests.
func NewCmdPinArtifact(f *cmdutil.Factory, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Env: f.Env, Logger: f.Logger}
	cmd := &cobra.Command{
		Use:   "pin-artifact {PATH|-|URL...|--from-discovery}",
		Short: "Print the blake3 checksums to pin in dynamo.kv.pinned_artifacts",
		Long: `The router loads a fleet's tokenizer and chat template only when its blake3
checksum is pinned in dynamo.kv.pinned_artifacts: those files come from the
fleet, and a chat template is code. Review each file, then pin it.

For each PATH or URL (file://, http(s)://, or hf://OWNER/REPO[@REVISION]/FILE
through $HF_ENDPOINT with $HF_TOKEN) pin-artifact prints "blake3:<hex>  NAME",
the digest b3sum prints (a URL named without its user info and query); "-"
reads standard input. With
--yaml it prints a dynamo.kv.pinned_artifacts block instead, ready to merge
into the configuration.

With --from-discovery it reads the live fleet (from --config, or the discovery
flags) and lists every artifact the workers' model cards declare, per model,
with the declared checksum and whether the configuration pins it.

Exit status 1 when an input cannot be read, or the fleet cannot be reached
or a signal comes before it was read.`,
		Example: `  continuum pin-artifact /models/Qwen3-0.6B/tokenizer.json /models/Qwen3-0.6B/tokenizer_config.json
  continuum pin-artifact --yaml hf://Qwen/Qwen3-0.6B/tokenizer.json hf://Qwen/Qwen3-0.6B/tokenizer_config.json
  continuum pin-artifact --from-discovery --config continuum.yaml
  continuum pin-artifact --from-discovery --etcd-endpoints http://etcd.dynamo.svc:2379 --json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ConfigFile = f.ConfigPath()
			opts.Inputs = args
			switch {
			case opts.FromDiscovery && len(args) > 0:
				return cmdutil.FlagErrorf("give inputs or --from-discovery, not both")
			case opts.FromDiscovery && opts.YAML:
				return cmdutil.FlagErrorf("--yaml pins files you have reviewed: hash them by path or URL, not --from-discovery")
			case !opts.FromDiscovery && len(args) == 0:
				return cmdutil.FlagErrorf("give at least one PATH or URL, or --from-discovery")
			case opts.YAML && opts.JSON:
				return cmdutil.FlagErrorf("--yaml and --json cannot be combined")
			}
			if opts.Timeout < 0 {
				return cmdutil.FlagErrorf("--timeout must not be negative")
			}
			if !opts.FromDiscovery {
				if n := opts.Discovery.FirstGiven(cmd.Flags()); n != "" {
					return cmdutil.FlagErrorf("--%s needs --from-discovery", n)
				}
			}
			opts.Discovery.Capture(cmd.Flags())
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return Run(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&opts.YAML, "yaml", false, "print a dynamo.kv.pinned_artifacts block")
	fl.BoolVar(&opts.JSON, "json", false, "print JSON")
	fl.BoolVar(&opts.FromDiscovery, "from-discovery", false, "list the artifacts the live fleet's model cards declare")
	fl.DurationVar(&opts.Timeout, "timeout", 0, fmt.Sprintf("how long to wait: for each remote input (default %v, the router's own bound on a fetch); with --from-discovery, for the fleet's first complete read (default %v)",
		artifact.LoadTimeout, discovery.SeedTimeout))
	opts.Discovery.Register(cmd)
	return cmd
}

// Run hashes the inputs, or lists the fleet's artifacts.
func Run(ctx context.Context, o *Options) error {
	if o.FromDiscovery {
		return runDiscovery(ctx, o)
	}
	return runHash(ctx, o)
}

// Digest is one hashed input.
type Digest struct {
	Name     string `json:"name"`
	Checksum string `json:"checksum"`
	Bytes    int64  `json:"bytes"`
}

func runHash(ctx context.Context, o *Options) error {
	hf := artifact.HFFromEnv(o.Env)
	var digests []Digest
	failed := 0
	for _, in := range o.Inputs {
		var d Digest
		var err error
		if in == "-" {
			d, err = hashStdin(cmdutil.Interruptible(ctx, o.IO.In))
		} else {
			d, err = hashOne(ctx, o.Client, in, hf, cmp.Or(o.Timeout, artifact.LoadTimeout))
		}
		if err != nil {
			failed++
			// The error may quote the server's answer (its status line):
			// printed escaped, never raw.
			fmt.Fprintf(o.IO.ErrOut, "pin-artifact: %s: %s\n", displayName(in), iostreams.Printable(err.Error()))
			continue
		}
		if d.Bytes > artifact.MaxArtifactBytes {
			fmt.Fprintf(o.IO.ErrOut, "pin-artifact: %s: %d bytes, over the 64 MiB artifact limit: the router will refuse it\n", d.Name, d.Bytes)
		}
		digests = append(digests, d)
		if !o.YAML && !o.JSON {
			if _, err := fmt.Fprintf(o.IO.Out, "%s  %s\n", d.Checksum, d.Name); err != nil {
				return err // a checksum that did not reach its reader is no pin
			}
		}
	}
	var err error
	switch {
	case o.JSON:
		if digests == nil {
			digests = []Digest{}
		}
		err = writeJSON(o.IO.Out, digests)
	case o.YAML && len(digests) > 0:
		err = writeYAML(o.IO.Out, digests)
	}
	if err != nil {
		return err
	}
	if failed > 0 {
		return cmdutil.Exit(cmdutil.ExitFailure)
	}
	return nil
}

// hashOne streams a local file whole; a remote input is read to at most
// one byte past the artifact limit, within timeout, so a source that never
// ends cannot hold the command.
func hashOne(ctx context.Context, client *http.Client, in string, hf artifact.HF, timeout time.Duration) (Digest, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rc, err := artifact.Open(ctx, client, in, hf)
	if err != nil {
		return Digest{}, err
	}
	defer func() { _ = rc.Close() }()
	var r io.Reader = rc
	remote := !artifact.LocationKind(in).Local()
	if remote {
		r = io.LimitReader(rc, artifact.MaxArtifactBytes+1)
	}
	sum, n, err := artifact.SumReader(r)
	if err != nil {
		return Digest{}, err
	}
	if remote && n > artifact.MaxArtifactBytes {
		return Digest{}, fmt.Errorf("%w: stopped reading at %d bytes", artifact.ErrTooLarge, n)
	}
	return Digest{Name: displayName(in), Checksum: sum.String(), Bytes: n}, nil
}

// hashStdin hashes standard input whole, as b3sum reads "-": a file
// piped in, its size warned about as a local file's is.
func hashStdin(in io.Reader) (Digest, error) {
	sum, n, err := artifact.SumReader(in)
	if err != nil {
		return Digest{}, fmt.Errorf("reading standard input: %w", err)
	}
	return Digest{Name: "-", Checksum: sum.String(), Bytes: n}, nil
}

// displayName is how an input is printed: a URL without its user info,
// query and fragment, which may hold credentials or a signature (and
// would otherwise land in the --yaml block's comment, then in a
// configuration kept in git), and without control characters.
func displayName(in string) string {
	if strings.Contains(in, "://") {
		in = artifact.Redact(in)
	}
	return iostreams.Printable(in)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeYAML prints the block that pins digests, each checksum once with
// the names it was computed for as a comment.
func writeYAML(w io.Writer, digests []Digest) error {
	var order []string
	names := map[string][]string{}
	for _, d := range digests {
		if _, ok := names[d.Checksum]; !ok {
			order = append(order, d.Checksum)
		}
		if n := commentSafe(d.Name); !slices.Contains(names[d.Checksum], n) {
			names[d.Checksum] = append(names[d.Checksum], n)
		}
	}
	var b strings.Builder
	b.WriteString("dynamo:\n  kv:\n    pinned_artifacts:\n")
	for _, c := range order {
		fmt.Fprintf(&b, "      - %q  # %s\n", c, strings.Join(names[c], ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// commentSafe keeps a name on its comment line.
func commentSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == 0x85 || r == 0x2028 || r == 0x2029 {
			return '?'
		}
		return r
	}, s)
}

// Report is the --from-discovery listing.
type Report struct {
	Source     string   `json:"source"`
	Namespaces []string `json:"namespaces"`
	Generation uint64   `json:"generation"`
	Models     []Model  `json:"models"`
}

// Model is one served model and the artifacts its workers' cards declare.
type Model struct {
	Namespace string     `json:"namespace"`
	Model     string     `json:"model"`
	Workers   int        `json:"workers"`
	Artifacts []Declared `json:"artifacts"`
}

// Declared is one artifact declaration and how many workers make it.
type Declared struct {
	Slot   string `json:"slot"`
	Format string `json:"format"`
	Kind   string `json:"kind"`
	// Location is the declared path or URL (a URL without its query and
	// user info, which may hold credentials).
	Location string `json:"location"`
	Checksum string `json:"checksum,omitempty"`
	Size     *int64 `json:"size,omitempty"`
	Pinned   bool   `json:"pinned"`
	Workers  int    `json:"workers"`
	// Problem says why the router would not load it even when pinned
	// (unsupported, malformed, or a source the configuration disallows).
	Problem string `json:"problem,omitempty"`
}

func runDiscovery(ctx context.Context, o *Options) error {
	cfg, err := o.Discovery.Resolve(o.ConfigFile, o.Env)
	if err != nil {
		return err
	}
	kv := &cfg.Dynamo.KV
	policy, err := artifact.PolicyFor(artifact.Settings{Pinned: kv.PinnedArtifacts, AllowHTTP: kv.AllowHTTPArtifacts,
		AllowHF: kv.AllowHFArtifacts, CacheDir: kv.ArtifactCacheDir}, o.Env)
	if err != nil {
		return cmdutil.FlagErrorf("dynamo.kv.%v", err)
	}
	logger, err := o.Logger()
	if err != nil {
		return err
	}
	d := &cfg.Dynamo.Discovery
	fl, err := sources.Open(ctx, d, o.Discovery.KubeClient(), logger, cmp.Or(o.Timeout, discovery.SeedTimeout))
	if err != nil {
		if ctx.Err() != nil {
			return cmdutil.ErrInterrupted
		}
		return err
	}
	defer fl.Close()
	reg, gen, src := fl.Registry, fl.Generation, fl.Source
	r := BuildReport(reg.Snapshot(), &policy)
	r.Source, r.Namespaces, r.Generation = src, d.Namespaces(), gen
	if r.Namespaces == nil {
		r.Namespaces = []string{}
	}
	if o.JSON {
		return writeJSON(o.IO.Out, r)
	}
	return writeTable(o.IO.Out, r)
}

// BuildReport lists the artifacts of every worker card in snap, per
// (namespace, model), judged against policy.
func BuildReport(snap *fleet.Snapshot, policy *artifact.Policy) Report {
	type modelKey struct{ ns, model string }
	models := map[modelKey]*Model{}
	index := map[modelKey]map[string]int{}
	for w := range snap.Workers.All() {
		if w.Card == nil {
			continue
		}
		mk := modelKey{w.ID.Namespace, w.Model}
		m, ok := models[mk]
		if !ok {
			m = &Model{Namespace: mk.ns, Model: mk.model, Artifacts: []Declared{}}
			models[mk], index[mk] = m, map[string]int{}
		}
		m.Workers++
		for _, ds := range artifact.CardSlots(w.Card.Typed.HFSource(), w.Card.Typed.Tokenizer, w.Card.Typed.PromptFormatter, w.Card.Typed.ChatTemplateFile) {
			d := declared(ds, policy)
			id := d.Slot + "\x00" + d.Format + "\x00" + d.Checksum + "\x00" + d.Location + "\x00" + d.Problem
			if i, ok := index[mk][id]; ok {
				m.Artifacts[i].Workers++
				continue
			}
			d.Workers = 1
			index[mk][id] = len(m.Artifacts)
			m.Artifacts = append(m.Artifacts, d)
		}
	}
	r := Report{Models: []Model{}}
	for _, m := range models {
		slots := map[string]int{}
		for i, s := range artifact.Slots {
			slots[string(s)] = i
		}
		slices.SortFunc(m.Artifacts, func(a, b Declared) int {
			return cmp.Or(cmp.Compare(slots[a.Slot], slots[b.Slot]), cmp.Compare(a.Checksum, b.Checksum), cmp.Compare(a.Location, b.Location))
		})
		r.Models = append(r.Models, *m)
	}
	slices.SortFunc(r.Models, func(a, b Model) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Model, b.Model))
	})
	return r
}

func declared(ds artifact.Declared, policy *artifact.Policy) Declared {
	d := Declared{Slot: string(ds.Slot), Format: ds.Format, Kind: string(ds.Kind), Location: ds.Location}
	if ds.Kind != artifact.KindPath {
		d.Location = artifact.Redact(ds.Location)
	}
	if ds.Size >= 0 {
		size := ds.Size
		d.Size = &size
	}
	if ds.Err != nil {
		d.Problem = ds.Err.Error()
		if ds.Checksum != (artifact.Checksum{}) {
			d.Checksum = ds.Checksum.String()
			d.Pinned = policy.Pinned(ds.Checksum) // pinned or not, whatever else is wrong
		}
		return d
	}
	d.Checksum = ds.Checksum.String()
	d.Pinned = policy.Pinned(ds.Checksum)
	switch {
	case (ds.Kind == artifact.KindHTTP || ds.Kind == artifact.KindHTTPS) && !policy.AllowHTTP:
		d.Problem = "dynamo.kv.allow_http_artifacts is false"
	case ds.Kind == artifact.KindHF && !policy.AllowHF:
		d.Problem = "dynamo.kv.allow_hf_artifacts is false"
	case ds.Size > artifact.MaxArtifactBytes:
		d.Problem = "declared size over 64 MiB"
	}
	return d
}

func writeTable(out io.Writer, r Report) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	count, unpinned := 0, 0
	for _, m := range r.Models {
		for _, a := range m.Artifacts {
			count++
			if !a.Pinned && a.Checksum != "" {
				unpinned++
			}
		}
	}
	fmt.Fprintf(tw, "source %s, namespaces %s, generation %d: %d models, %d artifacts, %d unpinned\n\n",
		r.Source, strings.Join(r.Namespaces, ","), r.Generation, len(r.Models), count, unpinned)
	if count > 0 {
		fmt.Fprintln(tw, "NAMESPACE\tMODEL\tSLOT\tFORMAT\tKIND\tCHECKSUM\tPINNED\tWORKERS\tLOCATION\tPROBLEM")
		for _, m := range r.Models {
			for _, a := range m.Artifacts {
				pinned := "no"
				if a.Pinned {
					pinned = "yes"
				}
				// Names, formats, locations and problems come from the
				// fleet's cards: printed for a terminal, never raw.
				pr := iostreams.Printable
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", pr(m.Namespace), pr(m.Model), pr(a.Slot), pr(a.Format),
					dash(a.Kind), dash(a.Checksum), pinned, a.Workers, m.Workers, pr(a.Location), pr(dash(a.Problem)))
			}
		}
	}
	if unpinned > 0 {
		fmt.Fprintf(tw, "\nReview each unpinned file, then pin it: continuum pin-artifact --yaml PATH|URL...\n")
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

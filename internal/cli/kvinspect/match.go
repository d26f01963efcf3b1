package kvinspect

// This file: `kv-inspect match`, what the router's KV-aware picker would
// do with one request over the live fleet, without dispatching it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/kvstack"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/router"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// DefaultArtifactTimeout bounds the wait for the model's tokenizer and
// template to load.
const DefaultArtifactTimeout = 30 * time.Second

// Endpoints a request may be for.
const (
	pathChat        = "/v1/chat/completions"
	pathCompletions = "/v1/completions"
)

// MatchOptions are the parsed flags of `kv-inspect match`.
type MatchOptions struct {
	LiveOptions
	// Completions: the request is a /v1/completions body.
	Completions     bool
	ArtifactTimeout time.Duration
}

// NewCmdMatch returns `kv-inspect match`. runF replaces the run step in
// tests.
func NewCmdMatch(f *cmdutil.Factory, runF func(context.Context, *MatchOptions) error) *cobra.Command {
	o := &MatchOptions{LiveOptions: LiveOptions{IO: f.IOStreams, Env: f.Env, Logger: f.Logger}}
	cmd := &cobra.Command{
		Use:   "match < request.json",
		Short: "Which worker the KV-aware picker would choose for a request, and every candidate's cost",
		Long: `Read one request on stdin, as a client would POST it to /v1/chat/completions
(or, with --completions, to /v1/completions), and explain what the router's
KV-aware picker would do with it over the live fleet, without sending it
anywhere.

The fleet is opened from --config or the discovery flags; its kv_metrics load
and its kv-events are followed for --duration, as the router follows them.
The model's tokenizer and chat template are loaded as the router loads them:
only what the workers' cards declare and dynamo.kv.pinned_artifacts pins
(waiting up to --artifact-timeout). The model is the request's "model" mapped
through dynamo.shim.model_map; the candidates are the workers of the
configured discovery namespaces.

Printed: the prompt's token count, the selection result (overlap,
no_overlap, artifact_unpinned, tokenizer_unavailable, ...) and, when there
is no prompt, why; the pin that would be chosen with each phase's reason;
and every candidate of the phases the cost formula chose with its load
state, overlap and cost terms (cached tokens, raw prefill blocks, overlap
credit, adjusted prefill, decode cost, total). Workers publish kv-events only
when their cache changes, so blocks cached before --duration began are not
seen until the worker stores or removes more.

Exit status 1 when no worker of the model is a candidate, or the fleet cannot
be reached or a signal comes before it was read.`,
		Example: `  echo '{"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}]}' |
    continuum kv-inspect match --config continuum.yaml
  continuum kv-inspect match --config continuum.yaml --duration 30s -o json < request.json
  echo '{"model": "qwen3", "prompt": "Once upon a time"}' | continuum kv-inspect match --completions --config continuum.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(f, cmd.Flags()); err != nil {
				return err
			}
			if o.ArtifactTimeout < 0 {
				return cmdutil.FlagErrorf("--artifact-timeout must not be negative")
			}
			if o.IO.IsStdinTTY() {
				return cmdutil.FlagErrorf("pipe the request's JSON body on stdin")
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return RunMatch(cmd.Context(), o)
		},
	}
	o.register(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&o.Completions, "completions", false, "the request is a /v1/completions body (a prompt) rather than a chat request")
	fl.DurationVar(&o.ArtifactTimeout, "artifact-timeout", DefaultArtifactTimeout, "how long to wait for the model's tokenizer and template to load")
	return cmd
}

// MatchReport is what `kv-inspect match` prints (-o json).
type MatchReport struct {
	// Model is the Dynamo model (the request's after dynamo.shim.model_map),
	// RequestModel the request's own.
	Model        string   `json:"model"`
	RequestModel string   `json:"request_model"`
	Path         string   `json:"path"`
	Namespaces   []string `json:"namespaces"`
	// PromptTokens is the rendered prompt's size, 0 without a prompt.
	PromptTokens int `json:"prompt_tokens"`
	// Result is the selection result the router would count; Reason says
	// why there is no prompt, when there is none.
	Result     string           `json:"result"`
	Reason     string           `json:"reason,omitempty"`
	Pin        MatchPin         `json:"pin"`
	Candidates []MatchCandidate `json:"candidates"`
}

// MatchPin is the pin the router would send.
type MatchPin struct {
	Namespace string       `json:"namespace"`
	Decode    MatchTarget  `json:"decode"`
	Prefill   *MatchTarget `json:"prefill"`
	// Bypass: the decode worker prefills the request itself (conditional
	// disaggregation).
	Bypass bool `json:"bypass"`
}

// MatchTarget is one pinned worker rank and why it was chosen.
type MatchTarget struct {
	InstanceID string `json:"instance_id"`
	WorkerID   string `json:"worker_id"`
	Component  string `json:"component"`
	DPRank     uint32 `json:"dp_rank"`
	Reason     string `json:"reason"`
}

// MatchCandidate is one candidate of a phase with its cost terms (in
// blocks of its block size). Total is the cost the choice compared, null
// for a candidate the freshness rules left out.
type MatchCandidate struct {
	Phase            string   `json:"phase"`
	InstanceID       string   `json:"instance_id"`
	WorkerID         string   `json:"worker_id"`
	Namespace        string   `json:"namespace"`
	Role             string   `json:"role"`
	DPRank           uint32   `json:"dp_rank"`
	State            string   `json:"state"`
	Competing        bool     `json:"competing"`
	Chosen           bool     `json:"chosen"`
	OverlapBlocks    int      `json:"overlap_blocks"`
	CachedTokens     int      `json:"cached_tokens"`
	RawPrefillBlocks float64  `json:"raw_prefill_blocks"`
	CreditBlocks     float64  `json:"overlap_credit_blocks"`
	AdjustedPrefill  float64  `json:"adjusted_prefill"`
	DecodeCostBlocks float64  `json:"decode_cost_blocks"`
	Total            *float64 `json:"total"`
}

// readRequest reads the request body on stdin: one JSON object with a
// "model", read as the router reads it (router.SummarizeBody), so that
// the picker is given the model and the token estimate the router would
// give it.
func readRequest(r io.Reader, path string) ([]byte, router.BodySummary, error) {
	body, err := io.ReadAll(io.LimitReader(r, MaxLine+1))
	if err != nil {
		return nil, router.BodySummary{}, err
	}
	if len(body) > MaxLine {
		return nil, router.BodySummary{}, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: fmt.Errorf("the request is over %d bytes", MaxLine)}
	}
	q, err := router.SummarizeBody(body)
	if err != nil {
		return nil, router.BodySummary{}, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: fmt.Errorf("the request on stdin: %w", err)}
	}
	switch {
	case q.Model == "":
		return nil, router.BodySummary{}, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: errors.New(`the request has no "model"`)}
	case path == pathChat && !q.Messages:
		return nil, router.BodySummary{}, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: errors.New(`the request has no "messages" (give --completions for a /v1/completions body)`)}
	case path == pathCompletions && !q.Prompt:
		return nil, router.BodySummary{}, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: errors.New(`the request has no "prompt"`)}
	}
	return body, q, nil
}

// RunMatch follows the fleet for --duration, waits for the model's
// artifacts, and prints what the KV-aware picker would choose. Every
// goroutine it starts has ended when it returns.
func RunMatch(ctx context.Context, o *MatchOptions) error {
	path := pathChat
	if o.Completions {
		path = pathCompletions
	}
	body, q, err := readRequest(cmdutil.Interruptible(ctx, o.IO.In), path)
	if err != nil {
		return err
	}
	cfg, fl, logger, err := o.openFleet(ctx)
	if err != nil {
		return err
	}
	defer fl.Close()
	model := q.Model
	if m, ok := cfg.Dynamo.Shim.ModelMap[model]; ok {
		model = m
	}
	namespaces := cfg.Dynamo.Discovery.Namespaces()
	store := load.NewStore(cfg.Dynamo.Load.MaxStaleness.D(), nil)
	st, err := kvstack.New(kvstack.Options{Config: cfg, Registry: fl.Registry, Base: pick.NewLoadBased(store), Env: o.Env, Logger: logger,
		KeepArtifactCache: true})
	if err != nil {
		return err
	}
	cidrs, err := zmtp.ParseCIDRs(cfg.Dynamo.Load.DirectAllowCIDRs)
	if err != nil {
		return err
	}
	sup := load.NewSupervisor(fl.Registry, store, &zmtp.Direct{Allow: cidrs}, nil, logger)

	// The parts outlive an interrupt of the wait below, so that what was
	// followed until then is still explained.
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { _ = st.Run(runCtx) })
	wg.Go(func() { _ = sup.Run(runCtx) })
	defer func() { stop(); wg.Wait() }()

	snap := fl.Registry.Snapshot()
	// Asking queues the model's pinned artifacts for loading at once.
	_, _ = st.Prompts.Diagnose(snap, model, path)
	loads, events := 0, 0
	for p := range snap.Publishers.All() {
		switch {
		case p.Topic == fleet.TopicLoad:
			loads++
		case kv.IsKVTopic(p.Topic):
			events++
		}
	}
	fmt.Fprintf(o.IO.ErrOut, "kv-inspect: source %s, generation %d: following %d kv_metrics and %d kv-events publishers for %s\n",
		fl.Source, fl.Generation, loads, events, o.Duration)
	sleep(ctx, o.Duration)
	waitArtifacts(ctx, st.Prompts, fl.Registry, model, path, o.ArtifactTimeout)

	snap = fl.Registry.Snapshot()
	// The router's own request: its busy rule keeps ranks over
	// busy_threshold out of the choice whatever their overlap.
	preq := pick.Request{Model: model, Namespaces: namespaces, EstPromptTokens: q.PromptTokenEstimate, Path: path, Body: body}
	if b := cfg.Dynamo.Load.BusyThreshold; b != nil {
		preq.Busy = pick.NewBusyThreshold(b.KVBlocks, b.PrefillTokens, b.Hysteresis)
	}
	ex, err := st.Picker.Explain(snap, preq, time.Now())
	if errors.Is(err, pick.ErrNoWorkers) {
		return fmt.Errorf("no worker of model %q in namespaces %s", model, strings.Join(namespaces, ", "))
	}
	if err != nil {
		return err
	}
	rep := report(ex, model, q.Model, path, namespaces)
	if ex.PromptTokens == 0 {
		if result, why := st.Prompts.Diagnose(snap, model, path); result == ex.Result && why != nil {
			rep.Reason = why.Error()
		}
	}
	if o.Output == "json" {
		enc := json.NewEncoder(o.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return writeMatchTable(o.IO.Out, rep)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// waitArtifacts waits, up to timeout or until ctx ends, while the model's
// artifacts are still loading.
func waitArtifacts(ctx context.Context, p *kv.Prompts, reg *fleet.Registry, model, path string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		_, why := p.Diagnose(reg.Snapshot(), model, path)
		if !errors.Is(why, artifact.ErrPending) || !time.Now().Before(deadline) || ctx.Err() != nil {
			return
		}
		sleep(ctx, 50*time.Millisecond)
	}
}

func target(t pick.Target, reason string) MatchTarget {
	return MatchTarget{InstanceID: t.Worker.InstanceHex(), WorkerID: t.Worker.WorkerIDDecimal(), Component: t.Worker.Component,
		DPRank: t.DPRank, Reason: reason}
}

func phaseName(p pick.Phase) string {
	if p == pick.PhasePrefill {
		return pick.RolePrefill
	}
	return pick.RoleDecode
}

// report renders an explanation.
func report(ex kv.Explanation, model, requested, path string, namespaces []string) MatchReport {
	rep := MatchReport{Model: model, RequestModel: requested, Path: path, Namespaces: namespaces, PromptTokens: ex.PromptTokens,
		Result: ex.Result, Candidates: []MatchCandidate{}}
	if rep.Namespaces == nil {
		rep.Namespaces = []string{}
	}
	pin := ex.Pin
	rep.Pin = MatchPin{Namespace: pin.Namespace, Decode: target(pin.Decode, pin.DecodeReason), Bypass: pin.Bypass}
	if pin.Bypass {
		rep.Pin.Decode.Reason = pin.PrefillReason // conditional_bypass
	}
	if pin.Prefill != nil {
		p := target(*pin.Prefill, pin.PrefillReason)
		rep.Pin.Prefill = &p
	}
	for _, c := range ex.Candidates {
		mc := MatchCandidate{Phase: phaseName(c.Phase), InstanceID: c.Worker.InstanceHex(), WorkerID: c.Worker.WorkerIDDecimal(),
			Namespace: c.Worker.ID.Namespace, Role: string(c.Worker.Role), DPRank: c.DPRank, State: c.State, Competing: c.Competing,
			OverlapBlocks: c.Cost.Overlap, CachedTokens: c.Cost.CachedTokens, RawPrefillBlocks: c.Cost.RawPrefillBlocks,
			CreditBlocks: c.Cost.CreditBlocks, AdjustedPrefill: c.Cost.AdjustedPrefill, DecodeCostBlocks: c.Cost.DecodeCostBlocks}
		if !math.IsNaN(c.Total) {
			total := c.Total
			mc.Total = &total
		}
		chosen := pin.Decode
		if c.Phase == pick.PhasePrefill && pin.Prefill != nil {
			chosen = *pin.Prefill
		}
		mc.Chosen = chosen.Worker != nil && chosen.Worker.ID == c.Worker.ID && chosen.DPRank == c.DPRank
		rep.Candidates = append(rep.Candidates, mc)
	}
	return rep
}

func targetText(t MatchTarget) string {
	return fmt.Sprintf("%s rank %d (%s, %s)", t.InstanceID, t.DPRank, iostreams.Printable(t.Component), t.Reason)
}

// writeMatchTable prints a report: the request and the result, the pin,
// then the candidates.
func writeMatchTable(w io.Writer, r MatchReport) error {
	model := fmt.Sprintf("%q", r.Model)
	if r.RequestModel != r.Model {
		model += fmt.Sprintf(" (requested as %q)", r.RequestModel)
	}
	fmt.Fprintf(w, "model %s, %s, namespaces %s\n", model, r.Path, strings.Join(r.Namespaces, ", "))
	if r.PromptTokens > 0 {
		fmt.Fprintf(w, "prompt: %d tokens\n", r.PromptTokens)
	} else {
		fmt.Fprintln(w, "prompt: none (the pick is by load alone)")
	}
	fmt.Fprintf(w, "result: %s\n", r.Result)
	if r.Reason != "" {
		// The reason may quote what the fleet's cards declare (an
		// artifact's path or URL): printed escaped, never raw.
		fmt.Fprintf(w, "why: %s\n", iostreams.Printable(r.Reason))
		if r.Result == kv.ResultArtifactUnpinned {
			fmt.Fprintln(w, "     review the files, then pin their checksums in dynamo.kv.pinned_artifacts (continuum pin-artifact --from-discovery)")
		}
	}
	fmt.Fprintf(w, "pin: namespace %s\n", iostreams.Printable(r.Pin.Namespace))
	if r.Pin.Prefill != nil {
		fmt.Fprintf(w, "  prefill %s\n", targetText(*r.Pin.Prefill))
	}
	fmt.Fprintf(w, "  decode  %s\n", targetText(r.Pin.Decode))
	if r.Pin.Bypass {
		fmt.Fprintln(w, "  the decode worker prefills the request itself (conditional disaggregation)")
	}
	fmt.Fprintln(w)
	if len(r.Candidates) == 0 {
		fmt.Fprintln(w, "no candidate was costed: the load rule chose")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, " \tPHASE\tINSTANCE\tRANK\tSTATE\tOVERLAP\tCACHED\tRAW PREFILL\tCREDIT\tADJ PREFILL\tDECODE\tTOTAL")
	for _, c := range r.Candidates {
		mark := " "
		if c.Chosen {
			mark = "*"
		}
		total := "-"
		if c.Total != nil {
			total = fmt.Sprintf("%.2f", *c.Total)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%s\n", mark, c.Phase, c.InstanceID, c.DPRank, c.State,
			c.OverlapBlocks, c.CachedTokens, c.RawPrefillBlocks, c.CreditBlocks, c.AdjustedPrefill, c.DecodeCostBlocks, total)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "(* chosen; costs in blocks; - not competing under the freshness rules)")
	return nil
}

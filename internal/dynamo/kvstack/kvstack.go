// Package kvstack assembles KV-aware selection from the configuration, over
// a fleet registry: the artifact loader (nothing loaded unless pinned), the
// index of the workers' KV caches, the kv-events subscriptions feeding it,
// prompt preparation and, over a load-based picker, the KV-aware picker.
// The serving daemon and `kv-inspect` build it the same way; View renders
// the index as GET /admin/dynamo/kv shows it.
//
// Imports: admin, artifact, config, fleet, kv, load, pick, telemetry and
// zmtp; never a command or the daemon.
package kvstack

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// Options are what a stack is built from.
type Options struct {
	// Config is read for dynamo.kv (the artifact policy and the picker's
	// settings) and dynamo.load (the transport and direct_allow_cidrs of
	// the kv-events subscriptions).
	Config *config.Config
	// Registry is the fleet the subscriptions follow.
	Registry *fleet.Registry
	// Base is the load-based picker the KV-aware picker wraps; without one
	// no picker is built.
	Base *pick.LoadBased
	// Metrics registers the KV and artifact families; nil leaves them
	// unregistered (they still count, for View).
	Metrics prometheus.Registerer
	// Families, when set, are the KV and artifact families to count in,
	// already registered (a daemon turning KV-aware selection off and on
	// again keeps counting in the same series); Metrics is then unused.
	Families *Families
	// Connector, when set, is how the kv-events subscriptions reach
	// publishers; without one it follows dynamo.load: direct within
	// direct_allow_cidrs, or no subscriptions with the broker transport.
	Connector zmtp.Connector
	// Env reads HF_ENDPOINT and HF_TOKEN for hf:// artifacts; nil reads
	// nothing.
	Env func(name string) (string, bool)
	// Logger receives the parts' logs; nil discards them.
	Logger *slog.Logger
	// KeepArtifactCache leaves the artifact cache's unpinned blobs alone
	// (a tool beside a router sharing its cache directory).
	KeepArtifactCache bool
	// Prefetch starts loading the pinned artifacts a model's cards
	// declare as soon as discovery shows the model (Run), rather than at
	// its first request: a router's first request of each model is then
	// KV-aware too.
	Prefetch bool
}

// Stack is KV-aware selection's parts, built and not running until Run.
type Stack struct {
	Loader  *artifact.Loader
	Index   *kv.Index
	Prompts *kv.Prompts
	// Subscriptions is nil with the broker transport and no
	// Options.Connector: brokers reach the router through the event bus,
	// whose connector the daemon passes.
	Subscriptions *kv.Subscriptions
	// Picker is nil when Options.Base was.
	Picker    *kv.Picker
	Metrics   *telemetry.KVMetrics
	Artifacts *telemetry.ArtifactMetrics

	reg      *fleet.Registry
	prefetch bool
}

// New builds the parts. An unparsable pin or CIDR is an error naming its
// key.
func New(o Options) (*Stack, error) {
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	k := &o.Config.Dynamo.KV
	policy, err := artifact.PolicyFor(artifact.Settings{Pinned: k.PinnedArtifacts, AllowHTTP: k.AllowHTTPArtifacts,
		AllowHF: k.AllowHFArtifacts, CacheDir: k.ArtifactCacheDir}, o.Env)
	if err != nil {
		return nil, fmt.Errorf("dynamo.kv.%w", err)
	}
	fam := o.Families
	if fam == nil {
		fam = NewFamilies(o.Metrics)
	}
	s := &Stack{reg: o.Registry, Artifacts: fam.Artifacts, Metrics: fam.KV, prefetch: o.Prefetch}
	// Every result is exported from the start, at zero: a scraper (top)
	// tells a router without KV-aware selection from one without traffic.
	for _, r := range kv.SelectionResults {
		s.Metrics.Selections.WithLabelValues(r)
	}
	for _, r := range kv.Results {
		s.Metrics.Events.WithLabelValues(r)
	}
	s.Loader, err = artifact.NewLoader(artifact.LoaderOptions{Policy: policy, Build: kv.Build, Logger: logger, Metrics: s.Artifacts,
		KeepCache: o.KeepArtifactCache})
	if err != nil {
		return nil, err
	}
	s.Index = kv.NewIndex()
	s.Prompts = kv.NewPrompts(s.Loader)
	conn := o.Connector
	if conn == nil && o.Config.Dynamo.Load.Transport != config.TransportBroker {
		cidrs, err := zmtp.ParseCIDRs(o.Config.Dynamo.Load.DirectAllowCIDRs)
		if err != nil {
			return nil, fmt.Errorf("dynamo.load.direct_allow_cidrs: %w", err)
		}
		conn = &zmtp.Direct{Allow: cidrs}
	}
	if conn != nil {
		s.Subscriptions = kv.NewSubscriptions(o.Registry, s.Index, conn, s.Metrics, logger)
	}
	if o.Base != nil {
		s.Picker = kv.NewPicker(o.Base, s.Index, s.Prompts, Settings(k), s.Metrics, s.Artifacts, logger)
	}
	return s, nil
}

// Families are the KV and artifact metric families.
type Families struct {
	KV        *telemetry.KVMetrics
	Artifacts *telemetry.ArtifactMetrics
}

// NewFamilies creates the families, registered on reg when it is not nil.
func NewFamilies(reg prometheus.Registerer) *Families {
	return &Families{KV: telemetry.NewKVMetrics(reg), Artifacts: telemetry.NewArtifactMetrics(reg)}
}

// Settings are the picker's settings of dynamo.kv.
func Settings(k *config.KV) kv.Settings {
	return kv.Settings{Terms: kv.Terms{OverlapScoreCredit: k.OverlapScoreCredit, PrefillLoadScale: k.PrefillLoadScale,
		Temperature: k.RouterTemperature}, SendTokenData: k.SendTokenData,
		Conditional: k.ConditionalDisaggregation.Enabled, DecodeBusyThreshold: k.ConditionalDisaggregation.DecodeBusyThreshold}
}

// Run runs the artifact loader and the subscriptions until ctx ends, and
// returns once both have stopped.
func (s *Stack) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() { errs[0] = s.Loader.Run(ctx) })
	if s.Subscriptions != nil {
		wg.Go(func() { errs[1] = s.Subscriptions.Run(ctx) })
	}
	if s.prefetch && s.reg != nil {
		wg.Go(func() { s.prefetchLoop(ctx) })
	}
	wg.Wait()
	return cmp.Or(errs[0], errs[1])
}

// prefetchEvery spaces the prefetches a fleet's changes cause: each walks
// every worker.
const prefetchEvery = time.Second

// prefetchLoop asks for the declared artifacts of every model the fleet
// shows, again after each change (at most once every prefetchEvery), until
// ctx ends.
func (s *Stack) prefetchLoop(ctx context.Context) {
	for {
		changed := s.reg.Changed()
		s.Prompts.Prefetch(s.reg.Snapshot())
		t := time.NewTimer(prefetchEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// View is the index as GET /admin/dynamo/kv shows it: its size and
// counters, every rank's blocks with the cursor of each subscription
// feeding it (namespaces from the registry's current snapshot), the
// kv-events subscriptions, and the events and selections by result. Lists
// are never null.
func (s *Stack) View() admin.KVResponse {
	st := s.Index.Stats()
	resp := admin.KVResponse{Enabled: true, Ranks: []admin.KVRank{}, Subscriptions: []admin.Subscription{},
		Index: admin.KVIndex{Nodes: st.Nodes, Ownerships: st.Ownerships, Ranks: st.Ranks, Subscriptions: st.Subscriptions,
			Cursors: st.Cursors, Bytes: st.Bytes, StoredBlocks: st.StoredBlocks, RemovedBlocks: st.RemovedBlocks,
			UnknownRemovals: st.UnknownRemovals, RefusedBlocks: st.RefusedBlocks, Rebinds: st.Rebinds, Gaps: st.Gaps}}
	if s.Picker != nil {
		resp.Index.InFlightRequests, resp.Index.InFlightBlocks = s.Picker.InFlightPrefixes()
	}
	for _, r := range s.Index.Ranks() {
		row := admin.KVRank{WorkerID: strconv.FormatUint(r.Rank.WorkerID, 10), Namespace: r.Rank.Namespace.String(), DPRank: r.Rank.DPRank,
			Blocks: r.Blocks, Cursors: []admin.KVCursor{}}
		for _, c := range r.Cursors {
			row.Cursors = append(row.Cursors, admin.KVCursor{PublisherID: strconv.FormatUint(uint64(c.Subscription), 10), EventID: c.EventID, Gaps: c.Gaps})
		}
		resp.Ranks = append(resp.Ranks, row)
	}
	if s.Subscriptions != nil {
		for _, sub := range s.Subscriptions.Subscriptions() {
			resp.Subscriptions = append(resp.Subscriptions, admin.SubscriptionView(sub))
		}
	}
	resp.Events = counts(s.Metrics.Events, nil)
	resp.Results = counts(s.Metrics.Selections, kv.SelectionResults)
	return resp
}

// counts lists a {result} counter's non-zero series: in order's order
// when given, else sorted by result.
func counts(vec *prometheus.CounterVec, order []string) []admin.KVCount {
	ch := make(chan prometheus.Metric, 64)
	go func() { vec.Collect(ch); close(ch) }()
	out := []admin.KVCount{}
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil || d.GetCounter().GetValue() <= 0 {
			continue
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "result" {
				out = append(out, admin.KVCount{Result: l.GetValue(), Count: uint64(d.GetCounter().GetValue())})
			}
		}
	}
	rank := func(r string) int {
		if i := slices.Index(order, r); i >= 0 {
			return i
		}
		return len(order)
	}
	slices.SortFunc(out, func(a, b admin.KVCount) int {
		return cmp.Or(cmp.Compare(rank(a.Result), rank(b.Result)), cmp.Compare(a.Result, b.Result))
	})
	return out
}

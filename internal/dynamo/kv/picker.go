package kv

import (
	"cmp"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/telemetry"
)

// Settings are the kv.* fields the picker reads at each request, so that a
// change applies at the next one without touching the index.
type Settings struct {
	Terms
	// SendTokenData sends the rendered prompt's ids as nvext.token_data.
	SendTokenData bool
	// Conditional lets the chosen decode worker of a prefill/decode fleet
	// prefill a request itself; DecodeBusyThreshold, when set, allows it
	// only while the worker's expected active blocks stay at most that
	// share of its total_kv_blocks.
	Conditional         bool
	DecodeBusyThreshold *float64
}

// Picker is the KV-aware picker: the load-based picker (its ledger, its
// decode rule) with the prefill choice, and the decode choice of an
// aggregated fleet, made by the cost formula with each rank's overlap of
// the request's prompt. Without a prompt (unpinned or disagreeing
// artifacts, a failed render) it picks by load alone, and counts why.
type Picker struct {
	base    *pick.LoadBased
	index   *Index
	prompts *Prompts
	metrics *telemetry.KVMetrics
	notes   *telemetry.ArtifactMetrics
	logger  *slog.Logger

	settings atomic.Pointer[Settings]
	// noted remembers the models whose unsupported block size was logged
	// (bounded: past the bound nothing more is logged).
	noted sync.Map
	nnote atomic.Int32

	buf sync.Pool // *matchBuf
	// inflight is the prompt blocks of the dispatches in flight, counted
	// as held by the ranks they were sent to.
	inflight *pending
}

var _ pick.Picker = (*Picker)(nil)

// NewPicker returns a KV-aware picker over base. metrics, notes and
// logger may be nil.
func NewPicker(base *pick.LoadBased, index *Index, prompts *Prompts, s Settings, metrics *telemetry.KVMetrics, notes *telemetry.ArtifactMetrics, logger *slog.Logger) *Picker {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Picker{base: base, index: index, prompts: prompts, metrics: metrics, notes: notes, logger: logger, inflight: newPending()}
	p.settings.Store(&s)
	p.buf.New = func() any { return &matchBuf{} }
	return p
}

// SetSettings applies kv.* settings from the next request on.
func (p *Picker) SetSettings(s Settings) { p.settings.Store(&s) }

// Settings returns the settings the next request is picked with.
func (p *Picker) Settings() Settings { return *p.settings.Load() }

// matchBuf holds one request's overlaps per hashing (hashingOf: a block
// size, Eagle or not), from the index and from the requests in flight.
type matchBuf struct {
	bySize [MaxBlockSizesPerRequest]struct {
		size     int // the hashing
		indexed  matches
		inFlight matches
	}
	n int
}

// matches are the ranks sharing leading blocks with a request: in a slice,
// scanned when they are few (the common case), else in a map too.
type matches struct {
	ranks []Match
	held  map[load.Key]int
}

// smallMatches is the most holders looked up by scanning.
const smallMatches = 32

func (m *matches) index() {
	if len(m.ranks) <= smallMatches {
		return
	}
	if m.held == nil {
		m.held = map[load.Key]int{}
	}
	clear(m.held)
	for _, r := range m.ranks {
		m.held[r.Rank] = r.Blocks
	}
}

func (m *matches) blocks(k load.Key) int {
	if len(m.ranks) > smallMatches {
		return m.held[k]
	}
	for _, r := range m.ranks {
		if r.Rank == k {
			return r.Blocks
		}
	}
	return 0
}

// Overlap implements Overlaps.
func (b *matchBuf) Overlap(k load.Key, hashing int) int {
	for i := range b.n {
		if sz := &b.bySize[i]; sz.size == hashing {
			return sz.indexed.blocks(k)
		}
	}
	return 0
}

// InFlight implements Overlaps.
func (b *matchBuf) InFlight(k load.Key, hashing int) int {
	for i := range b.n {
		if sz := &b.bySize[i]; sz.size == hashing {
			return sz.inFlight.blocks(k)
		}
	}
	return 0
}

// Reserve implements pick.Picker.
func (p *Picker) Reserve(snap *fleet.Snapshot, req pick.Request, now time.Time) (pick.Pin, pick.Ticket, error) {
	began := time.Now()
	s := p.settings.Load()
	prompt, result := p.prompts.PrepareSalted(snap, req.Model, req.Path, req.Body, p.blockSizes(snap, req), req.CacheSalt)
	// The dispatch is recorded as of when it is made, after the prompt's
	// preparation (a long prompt takes milliseconds, more when permits are
	// scarce): a load sample the rank sent meanwhile cannot count it, and
	// must not end its place in the ledger.
	now = now.Add(time.Since(began))
	if prompt == nil {
		pin, t, err := p.base.Reserve(snap, req, now)
		if err == nil {
			p.count(result)
		}
		return pin, t, err
	}
	b := p.buf.Get().(*matchBuf)
	defer p.buf.Put(b)
	p.matchPrompt(b, prompt, now)
	ch := &choice{terms: s.Terms, isl: len(prompt.IDs), overlaps: b, conditional: s.Conditional, busy: s.DecodeBusyThreshold}
	// The load rule (the decode choice, and any choice the formula does
	// not make) keeps its own estimate of the prompt's size, as the
	// load-only picker's; the ledger books the real size when larger.
	req.BookTokens = max(req.BookTokens, len(prompt.IDs))
	pin, t, err := p.base.ReserveScored(snap, req, now, ch)
	if err != nil {
		return pin, t, err
	}
	// The rank that prefills the request: the prefill worker of a pair,
	// else the decode worker (aggregated, or prefilling it itself).
	target := pin.Decode
	if pin.Prefill != nil {
		target = *pin.Prefill
	}
	if h := hashingOf(target.Worker); h != 0 {
		p.inflight.add(t, load.RankOf(target.Worker, target.DPRank), h, prompt.Hashes[h], now)
	}
	switch {
	case pin.Bypass:
		p.count(ResultBypass)
	case ch.Scored && ch.ChosenIndexed > 0:
		p.count(ResultOverlap)
	default:
		p.count(ResultNoOverlap)
	}
	if s.SendTokenData && prompt.Portable {
		pin.TokenIDs = prompt.IDs
	}
	return pin, t, nil
}

// Explanation is what Reserve would do with a request, without doing it.
type Explanation struct {
	Pin pick.Pin
	// Result is the selection result Reserve would count.
	Result string
	// PromptTokens is the rendered prompt's size (0 without a prompt).
	PromptTokens int
	// Candidates are the candidates of every phase the cost formula
	// chose, with their costs.
	Candidates []Explained
}

// Explain computes what Reserve would pick for req, and every candidate's
// overlap and cost, without recording a dispatch.
func (p *Picker) Explain(snap *fleet.Snapshot, req pick.Request, now time.Time) (Explanation, error) {
	s := p.settings.Load()
	prompt, result := p.prompts.PrepareSalted(snap, req.Model, req.Path, req.Body, p.blockSizes(snap, req), req.CacheSalt)
	if prompt == nil {
		pin, err := p.base.Pick(snap, req, now)
		return Explanation{Pin: pin, Result: result}, err
	}
	b := &matchBuf{}
	p.matchPrompt(b, prompt, now)
	ch := &choice{terms: s.Terms, isl: len(prompt.IDs), overlaps: b, conditional: s.Conditional, busy: s.DecodeBusyThreshold, explain: true}
	req.BookTokens = max(req.BookTokens, len(prompt.IDs))
	pin, err := p.base.PickScored(snap, req, now, ch)
	ex := Explanation{Pin: pin, PromptTokens: len(prompt.IDs), Candidates: ch.explained, Result: ResultNoOverlap}
	switch {
	case pin.Bypass:
		ex.Result = ResultBypass
	case ch.Scored && ch.ChosenIndexed > 0:
		ex.Result = ResultOverlap
	}
	return ex, err
}

// matchPrompt fills b with the overlaps of prompt per block size: what
// the index says each rank holds, and what the requests in flight on it
// will have it hold.
func (p *Picker) matchPrompt(b *matchBuf, prompt *Prompt, now time.Time) {
	b.n = 0
	for size, hashes := range prompt.Hashes {
		slot := &b.bySize[b.n]
		b.n++
		slot.size = size
		slot.indexed.ranks = p.index.FindMatches(hashes, slot.indexed.ranks[:0])
		slot.indexed.index()
		slot.inFlight.ranks = p.inflight.overlaps(hashes, size, now, slot.inFlight.ranks[:0])
		slot.inFlight.index()
	}
}

// Release implements pick.Picker.
func (p *Picker) Release(t pick.Ticket) {
	p.inflight.done(t)
	p.base.Release(t)
}

// InFlightPrefixes returns the dispatches whose prompt blocks count as
// held by the rank they were sent to, and those blocks.
func (p *Picker) InFlightPrefixes() (requests, blocks int) { return p.inflight.size() }

func (p *Picker) count(result string) {
	if p.metrics != nil && result != "" {
		p.metrics.Selections.WithLabelValues(result).Inc()
	}
}

// maxNotedModels bounds the models whose unsupported block size is logged.
const maxNotedModels = 4096

// blockSizes returns the hashings (hashingOf: block sizes, Eagle or not)
// of the request's candidate workers, the most common first, at most
// MaxBlockSizesPerRequest of the supported ones. An unsupported size is
// logged once per model and counted as an unsupported artifact.
func (p *Picker) blockSizes(snap *fleet.Snapshot, req pick.Request) []int {
	type sized struct{ size, n int }
	var sizes []sized
	for i, ns := range req.Namespaces {
		if slices.Contains(req.Namespaces[:i], ns) {
			continue // listed twice
		}
		for w := range snap.Workers.Serving(ns, req.Model) {
			if w.BlockSize == nil {
				continue
			}
			bs := int(*w.BlockSize)
			if bs < MinBlockSize || bs > MaxBlockSize {
				p.noteUnsupported(req.Model, bs)
				continue
			}
			bs = hashingOf(w)
			if i := slices.IndexFunc(sizes, func(s sized) bool { return s.size == bs }); i >= 0 {
				sizes[i].n++
			} else {
				sizes = append(sizes, sized{bs, 1})
			}
		}
	}
	slices.SortFunc(sizes, func(a, b sized) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.size, b.size)) })
	out := make([]int, 0, MaxBlockSizesPerRequest)
	for _, s := range sizes[:min(len(sizes), MaxBlockSizesPerRequest)] {
		out = append(out, s.size)
	}
	return out
}

func (p *Picker) noteUnsupported(model string, bs int) {
	if _, seen := p.noted.Load(model); seen || p.nnote.Load() >= maxNotedModels {
		return
	}
	if _, loaded := p.noted.LoadOrStore(model, true); loaded {
		return
	}
	p.nnote.Add(1)
	p.logger.Warn("kv-aware selection cannot hash prompts at a block size of the model's workers: they compete as holding none of the prompt",
		"model", model, "block_size", bs, "supported", "16..65536")
	if p.notes != nil {
		p.notes.Artifacts.WithLabelValues(telemetry.ArtifactUnsupported).Inc()
	}
}

package tui

import (
	"cmp"
	"context"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	tea "charm.land/bubbletea/v2"

	"github.com/continuum-router/continuum/internal/admin"
)

// maxRanksPerWorker bounds the rows one worker makes: the router takes
// no card declaring more data-parallel ranks than this, and a worker list
// from elsewhere (another build, a proxy) must not make millions of rows.
const maxRanksPerWorker = 1024

// View is one of top's screens.
type View int

// The views, in tab order.
const (
	ViewFleet View = iota
	ViewSubscriptions
	ViewRouting
	ViewProblems
	viewCount
)

var viewNames = [...]string{"Fleet", "Subscriptions", "Routing", "Problems"}

func (v View) String() string { return viewNames[v] }

// SortBy orders the fleet view within each (namespace, model, role) group.
type SortBy int

// Sort orders, in the order `s` cycles through them.
const (
	SortLoad SortBy = iota
	SortID
	SortAge
	SortSelections
	sortCount
)

var sortNames = [...]string{"load", "id", "age", "selections"}

func (s SortBy) String() string { return sortNames[s] }

// historyLen is how many polls the routing sparklines remember.
const historyLen = 60

// maxBackoff caps the wait between polls of an unreachable router.
const maxBackoff = 30 * time.Second

// FetchFunc takes one snapshot; it runs inside a tea.Cmd.
type FetchFunc func(ctx context.Context, now time.Time) (*Snapshot, error)

// Options shape a model.
type Options struct {
	Router   string
	Interval time.Duration
	// Timeout bounds each poll (default: the interval, at least 2 s).
	Timeout time.Duration
	Fetch   FetchFunc
	Color   bool
}

// Messages.
type (
	tickMsg     time.Time
	snapshotMsg struct{ snap *Snapshot }
	fetchErrMsg struct {
		err error
		at  time.Time
	}
)

// SnapshotMsg wraps a snapshot as the message a poll delivers (tests and
// --once feed the model with it).
func SnapshotMsg(s *Snapshot) tea.Msg { return snapshotMsg{s} }

// FetchErrMsg is the message a failed poll delivers.
func FetchErrMsg(err error, at time.Time) tea.Msg { return fetchErrMsg{err, at} }

// Row is one (worker, dp rank) of the fleet view.
type Row struct {
	Worker admin.Worker
	Rank   uint32
	Load   *admin.LoadSample
	// SelRate is picks per second over the last poll interval.
	SelRate float64
	// worker and sample index the row's worker and load sample (-1 for
	// none) in the snapshot, so that the --once document can take them
	// from the answer as sent rather than as drawn.
	worker, sample int
}

func (r *Row) group() string {
	return r.Worker.Namespace + " / " + r.Worker.Model + " / " + r.Worker.Role
}

// used is the row's load fraction for sorting: the larger of its decode
// (or kv) and prefill fractions.
func (r *Row) used() float64 {
	if r.Load == nil {
		return -1
	}
	f := 0.0
	if n, ok := decodeUsed(r.Load); ok && r.Worker.Capacity.TotalKVBlocks != nil && *r.Worker.Capacity.TotalKVBlocks > 0 {
		f = float64(n) / float64(*r.Worker.Capacity.TotalKVBlocks)
	}
	if r.Load.ActivePrefillTokens != nil && r.Worker.Capacity.MaxNumBatchedTokens != nil && *r.Worker.Capacity.MaxNumBatchedTokens > 0 {
		f = max(f, float64(*r.Load.ActivePrefillTokens)/float64(*r.Worker.Capacity.MaxNumBatchedTokens))
	}
	return f
}

// decodeUsed is active_decode_blocks, or kv_used_blocks from workers that
// publish only that (Dynamo before 1.4).
func decodeUsed(l *admin.LoadSample) (uint64, bool) {
	switch {
	case l.ActiveDecodeBlocks != nil:
		return *l.ActiveDecodeBlocks, true
	case l.KVUsedBlocks != nil:
		return *l.KVUsedBlocks, true
	}
	return 0, false
}

// Model is top's state. It is a value: Update returns the next one.
type Model struct {
	opts   Options
	keys   KeyMap
	styles Styles

	// snap and prev are the last two polls with their strings escaped for
	// the terminal, raw the last one as the router sent it (for the JSON
	// document); all the views draw from snap.
	snap, prev, raw *Snapshot
	rows            []Row // filtered and sorted
	omitted         int   // ranks past the rows' bound (admin.MaxRanks)
	// hist holds per-series rates (selections by role/reason, errors by
	// phase), oldest first, at most historyLen each.
	hist map[string][]float64

	err       error
	errSince  time.Time
	failures  int
	lastPoll  time.Time
	width     int
	height    int
	view      View
	cursor    int
	offset    int
	sortBy    SortBy
	filter    string
	filtering bool
	detail    bool
	// departed is the worker rank the open detail was on when it left the
	// fleet (at departedAt): the detail keeps showing it, said to be gone,
	// rather than whatever row the cursor is left on.
	departed   *Row
	departedAt time.Time
	paused     bool
	help       bool
	quitting   bool
}

// New returns a model; Init starts polling.
func New(o Options) Model {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = max(o.Interval, 2*time.Second)
	}
	return Model{opts: o, keys: DefaultKeyMap(), styles: NewStyles(o.Color), hist: map[string][]float64{}, width: 80, height: 24}
}

// Init polls at once.
func (m Model) Init() tea.Cmd { return m.fetchCmd() }

func (m Model) fetchCmd() tea.Cmd {
	fetch, timeout := m.opts.Fetch, m.opts.Timeout
	if fetch == nil {
		return nil
	}
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		now := time.Now()
		s, err := fetch(ctx, now)
		if err != nil {
			return fetchErrMsg{err, now}
		}
		return snapshotMsg{s}
	}
}

func tick(d time.Duration) tea.Cmd {
	return tea.Tick(d, func(t time.Time) tea.Msg { return tickMsg(t) })
}

// backoff is the wait after n consecutive failures: the interval doubled
// per failure, capped at maxBackoff.
func (m Model) backoff() time.Duration {
	d := m.opts.Interval
	for i := 1; i < m.failures && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, max(maxBackoff, m.opts.Interval))
}

// Update applies one message. It does no I/O.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.clampCursor()
		return m, nil
	case tickMsg:
		if m.paused {
			return m, tick(m.opts.Interval)
		}
		return m, m.fetchCmd()
	case snapshotMsg:
		m = m.applySnapshot(msg.snap)
		return m, tick(m.opts.Interval)
	case fetchErrMsg:
		m.err = msg.err
		if m.errSince.IsZero() {
			m.errSince = msg.at
		}
		m.failures++
		m.lastPoll = msg.at
		return m, tick(m.backoff())
	case tea.KeyPressMsg:
		return m.key(msg)
	case tea.PasteMsg:
		if m.filtering {
			m.filter = addFilterText(m.filter, msg.Content)
			m.rows, m.omitted = m.buildRows()
			m.cursor = 0
			m.clampCursor()
		}
		return m, nil
	}
	return m, nil
}

// maxFilterRunes bounds the filter's text.
const maxFilterRunes = 64

// addFilterText appends what was typed or pasted to the filter: its
// printable characters only (a pasted line break or terminal control
// would be drawn raw in the prompt), at most maxFilterRunes in all.
func addFilterText(filter, text string) string {
	r := []rune(filter)
	for _, c := range text {
		if len(r) >= maxFilterRunes {
			break
		}
		if unicode.IsPrint(c) {
			r = append(r, c)
		}
	}
	return string(r)
}

func (m Model) applySnapshot(s *Snapshot) Model {
	if s == nil {
		return m
	}
	m.prev, m.snap, m.raw = m.snap, escapedSnapshot(s), s
	s = m.snap
	m.err, m.errSince, m.failures, m.lastPoll = nil, time.Time{}, 0, s.At
	if m.prev != nil {
		dt := s.At.Sub(m.prev.At).Seconds()
		// Only series the router still reports are kept (after a router
		// restart, old ones would otherwise add their last rate forever).
		hist := make(map[string][]float64, len(m.hist))
		for _, fam := range []string{"continuum_dynamo_selection_total", "disaggregated_errors_total", "disaggregated_requests_total",
			"continuum_dynamo_kv_selection_total"} {
			for key, v := range s.Metrics[fam] {
				rate := 0.0
				if dt > 0 {
					rate = counterIncrease(m.prev.Metrics[fam][key], v) / dt
				}
				id := fam + "{" + key + "}"
				h := append(append([]float64(nil), m.hist[id]...), rate)
				if len(h) > historyLen {
					h = h[len(h)-historyLen:]
				}
				hist[id] = h
			}
		}
		m.hist = hist
	}
	m.rebuildKeepingSelection()
	return m
}

// counterIncrease is how much a counter grew from prev to cur. A counter
// that went down was reset (the router restarted, a worker's record came
// back): it counted from zero since, so its whole value is the increase,
// as Prometheus' rate() reads a reset, where a difference would show no
// traffic for a poll that had some.
func counterIncrease(prev, cur float64) float64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// rebuildKeepingSelection rebuilds the fleet rows with the cursor on the
// worker rank it was on, wherever that row sorts now: loads change every
// poll, and a cursor kept by position would jump to another worker (and
// the detail it shows with it). A row that is gone leaves the cursor
// where it was; an open detail stays on the worker that left, said to be
// gone, until it is closed, the cursor moves, or the worker comes back.
func (m *Model) rebuildKeepingSelection() {
	sel, had := m.Selected()
	if m.departed != nil {
		sel, had = *m.departed, true
	}
	m.rows, m.omitted = m.buildRows()
	found := false
	if had {
		for i := range m.rows {
			r := &m.rows[i]
			if r.Rank == sel.Rank && r.Worker.WorkerID == sel.Worker.WorkerID && r.Worker.Namespace == sel.Worker.Namespace {
				m.cursor, found = i, true
				break
			}
		}
	}
	switch {
	case found:
		m.departed = nil
	case had && m.detail && m.departed == nil && m.snap != nil:
		m.departed, m.departedAt = &sel, m.snap.At
	}
	m.clampCursor()
}

// detailRow is the row the open detail shows: the worker that left while
// it was open, else the one under the cursor.
func (m Model) detailRow() (Row, bool) {
	if m.departed != nil {
		return *m.departed, true
	}
	return m.Selected()
}

// buildRows joins workers with their load rows, filters and sorts them:
// at most admin.MaxRanks rows (a router lists no more), omitted counting
// the ranks past them.
func (m Model) buildRows() (rows []Row, omitted int) {
	if m.snap == nil {
		return nil, 0
	}
	// By namespace too: two graphs may reuse instance ids.
	type key struct {
		ns, id string
		rank   uint32
	}
	samples := map[key]int{}
	for i, s := range m.snap.Load.Samples {
		samples[key{s.Namespace, s.WorkerID, s.DPRank}] = i
	}
	prevSel := map[key]uint64{}
	var dt float64
	if m.prev != nil {
		dt = m.snap.At.Sub(m.prev.At).Seconds()
		for _, s := range m.prev.Load.Samples {
			prevSel[key{s.Namespace, s.WorkerID, s.DPRank}] = s.Selections
		}
	}
	filter := strings.ToLower(strings.TrimSpace(m.filter))
	for wi, w := range m.snap.Workers.Workers {
		if filter != "" && !matches(w, filter) {
			continue
		}
		size := min(max(w.DPSize, 1), maxRanksPerWorker)
		if left := admin.MaxRanks - len(rows); int(size) > left {
			omitted += int(size) - left
			size = uint32(left)
		}
		for r := range size {
			rank := w.DPStartRank + r
			row := Row{Worker: w, Rank: rank, worker: wi, sample: -1}
			if si, ok := samples[key{w.Namespace, w.WorkerID, rank}]; ok {
				row.Load, row.sample = &m.snap.Load.Samples[si], si
			}
			if row.Load != nil && dt > 0 {
				if p, ok := prevSel[key{w.Namespace, w.WorkerID, rank}]; ok {
					row.SelRate = counterIncrease(float64(p), float64(row.Load.Selections)) / dt
				}
			}
			rows = append(rows, row)
		}
	}
	less := func(a, b *Row) int {
		switch m.sortBy {
		case SortLoad:
			return cmpFloat(b.used(), a.used())
		case SortAge:
			return cmpFloat(float64(age(a)), float64(age(b)))
		case SortSelections:
			return cmpFloat(b.SelRate, a.SelRate)
		}
		return 0
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := &rows[i], &rows[j]
		// By group (namespace, model, role), field by field: group()'s
		// string orders the same, but would be built per comparison.
		if g := cmp.Or(strings.Compare(a.Worker.Namespace, b.Worker.Namespace), strings.Compare(a.Worker.Model, b.Worker.Model),
			strings.Compare(a.Worker.Role, b.Worker.Role)); g != 0 {
			return g < 0
		}
		if c := less(a, b); c != 0 {
			return c < 0
		}
		if c := cmpHexID(a.Worker.InstanceID, b.Worker.InstanceID); c != 0 {
			return c < 0
		}
		return a.Rank < b.Rank
	})
	return rows, omitted
}

// cmpHexID orders instance ids, unpadded hex, by value: the shorter is
// the smaller ("fff" before "1000"), as a string compare would not have it.
func cmpHexID(a, b string) int {
	return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(strings.ToLower(a), strings.ToLower(b)))
}

func age(r *Row) int64 {
	if r.Load == nil || r.Load.State == "none" {
		return 1 << 62
	}
	return r.Load.AgeMs
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// matches reports whether a worker matches a filter: every word must
// appear in its model, namespace, role, instance id or worker id.
func matches(w admin.Worker, filter string) bool {
	hay := strings.ToLower(strings.Join([]string{w.Model, w.Namespace, w.Role, w.InstanceID, w.WorkerID}, " "))
	for _, word := range strings.Fields(filter) {
		if !strings.Contains(hay, word) {
			return false
		}
	}
	return true
}

func (m *Model) clampCursor() {
	n := m.listLen()
	if m.cursor >= n {
		m.cursor = n - 1
	}
	if m.cursor < 0 {
		m.cursor = 0
	}
}

// listLen is how many selectable lines the current view has.
func (m *Model) listLen() int {
	switch m.view {
	case ViewFleet:
		return len(m.rows)
	case ViewSubscriptions:
		if m.snap != nil {
			return len(m.snap.Workers.Subscriptions)
		}
	case ViewProblems:
		if m.snap != nil {
			return len(m.snap.Problems.Problems)
		}
	}
	return 0
}

func (m Model) key(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	s := k.String()
	if m.filtering {
		switch s {
		case "enter":
			m.filtering = false
		case "esc":
			m.filtering, m.filter = false, ""
		case "backspace":
			if r := []rune(m.filter); len(r) > 0 {
				m.filter = string(r[:len(r)-1])
			}
		case "ctrl+c":
			m.quitting = true
			return m, tea.Quit
		case "space":
			m.filter = addFilterText(m.filter, " ")
		default:
			m.filter = addFilterText(m.filter, k.Text)
		}
		m.rows, m.omitted = m.buildRows()
		m.cursor = 0
		m.clampCursor()
		return m, nil
	}
	if m.help {
		m.help = false
		if !m.keys.Quit.Has(s) {
			return m, nil
		}
	}
	switch {
	case m.keys.Quit.Has(s):
		m.quitting = true
		return m, tea.Quit
	case m.keys.Help.Has(s):
		m.help = true
	case m.detail && (m.keys.Detail.Has(s) || m.keys.Back.Has(s)):
		m.detail, m.departed = false, nil
	case m.keys.Back.Has(s):
		if m.filter != "" {
			m.filter = ""
			m.rows, m.omitted = m.buildRows()
			m.clampCursor()
		}
	case m.keys.Up.Has(s):
		m.cursor--
		m.departed = nil
		m.clampCursor()
	case m.keys.Down.Has(s):
		m.cursor++
		m.departed = nil
		m.clampCursor()
	case m.keys.Top.Has(s):
		m.cursor = 0
		m.departed = nil
	case m.keys.Bottom.Has(s):
		m.cursor = m.listLen() - 1
		m.departed = nil
		m.clampCursor()
	case m.keys.NextView.Has(s):
		m.view = (m.view + 1) % viewCount
		m.cursor, m.offset, m.detail, m.departed = 0, 0, false, nil
	case m.keys.PrevView.Has(s):
		m.view = (m.view + viewCount - 1) % viewCount
		m.cursor, m.offset, m.detail, m.departed = 0, 0, false, nil
	case len(s) == 1 && s[0] >= '1' && s[0] < '1'+byte(viewCount):
		m.view = View(s[0] - '1')
		m.cursor, m.offset, m.detail, m.departed = 0, 0, false, nil
	case m.keys.Filter.Has(s):
		m.view, m.filtering, m.detail, m.departed = ViewFleet, true, false, nil
		m.clampCursor()
	case m.keys.Sort.Has(s):
		m.sortBy = (m.sortBy + 1) % sortCount
		m.rebuildKeepingSelection()
	case m.keys.Detail.Has(s):
		if m.view == ViewFleet && len(m.rows) > 0 {
			m.detail, m.departed = true, nil
		}
	case m.keys.Pause.Has(s):
		m.paused = !m.paused
	}
	return m, nil
}

// Rows is the fleet view's rows as shown (filtered and sorted).
func (m Model) Rows() []Row { return m.rows }

// Err is the last poll's error, nil after a good poll.
func (m Model) Err() error { return m.err }

// Snapshot is the last good poll, its strings escaped as the views draw
// them.
func (m Model) Snapshot() *Snapshot { return m.snap }

// Selected returns the row under the cursor.
func (m Model) Selected() (Row, bool) {
	if m.view != ViewFleet || m.cursor >= len(m.rows) || len(m.rows) == 0 {
		return Row{}, false
	}
	return m.rows[m.cursor], true
}

func fmtRate(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

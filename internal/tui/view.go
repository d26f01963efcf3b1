package tui

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// wide is the width from which the problems view shows its extra column.
const wide = 120

// View is the program's frame: the screen Render draws, on the
// terminal's alternate screen.
func (m Model) View() tea.View {
	v := tea.NewView(m.Render())
	v.AltScreen = true
	return v
}

// Render draws the whole screen at the model's size.
func (m Model) Render() string {
	if m.quitting {
		return ""
	}
	w, h := max(m.width, 20), max(m.height, 5)
	lines := append([]string{m.title(), m.tabs(w)}, m.banner()...)
	bodyH := h - len(lines) - 1
	var body []string
	switch {
	case m.help:
		body = m.helpBody()
	case m.snap == nil:
		body = []string{"", m.styles.Dim.Render("  waiting for the first answer from " + m.opts.Router + " …")}
	case m.view == ViewFleet && m.detail:
		body = m.detailBody()
	case m.view == ViewFleet:
		body = m.fleetBody(w, bodyH)
	case m.view == ViewSubscriptions:
		body = m.subscriptionsBody(bodyH)
	case m.view == ViewRouting:
		body = m.routingBody(w)
	case m.view == ViewProblems:
		body = m.problemsBody(w, bodyH)
	}
	if len(body) > bodyH {
		body = body[:bodyH]
	}
	lines = append(lines, body...)
	for len(lines) < h-1 {
		lines = append(lines, "")
	}
	lines = append(lines, m.footer())
	for i, l := range lines {
		lines[i] = ansi.Truncate(l, w, "…")
	}
	return strings.Join(lines, "\n")
}

func (m Model) title() string {
	router := strings.TrimPrefix(strings.TrimPrefix(m.opts.Router, "http://"), "https://")
	parts := []string{m.styles.Title.Render("continuum top"), router}
	if s := m.snap; s != nil {
		src := s.Workers.Source
		if src == "" {
			src = "discovery off"
		}
		parts = append(parts, fmt.Sprintf("%s gen %d", src, s.Workers.Generation),
			plural(len(s.Workers.Workers), "worker"),
			fmtRate(m.rateSum("continuum_dynamo_selection_total", "role=decode"))+" req/s",
			s.At.Format("15:04:05"))
		if m.omitted > 0 {
			parts = append(parts, m.styles.Bad.Render(fmt.Sprintf("%d ranks past %d not shown", m.omitted, admin.MaxRanks)))
		}
	}
	return strings.Join(parts, " · ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// rateSum adds the latest rates of a family's series whose labels contain
// sub ("" for all).
func (m Model) rateSum(family, sub string) float64 {
	var sum float64
	for id, h := range m.hist {
		if strings.HasPrefix(id, family+"{") && strings.Contains(id, sub) && len(h) > 0 {
			sum += h[len(h)-1]
		}
	}
	return sum
}

func (m Model) tabs(w int) string {
	var parts []string
	for v := range viewCount {
		name := fmt.Sprintf("%d %s", v+1, v)
		if w < 100 && v == ViewSubscriptions {
			name = fmt.Sprintf("%d Subs", v+1)
		}
		if v == m.view {
			parts = append(parts, m.styles.ActiveTab.Render("["+name+"]"))
		} else {
			parts = append(parts, m.styles.Tab.Render(" "+name+" "))
		}
	}
	line := strings.Join(parts, " ")
	if m.view == ViewFleet {
		line += "  sort:" + m.sortBy.String()
		if m.filtering {
			line += "  filter: " + m.filter + "▏"
		} else if m.filter != "" {
			line += "  filter: " + m.filter
		}
	}
	if m.paused {
		line += "  " + m.styles.Stale.Render("PAUSED")
	}
	return line
}

// banner is one line, blank when all is well, or two when polls fail: the
// state and the error.
func (m Model) banner() []string {
	switch {
	case m.err != nil:
		state := "disconnected since"
		if m.snap == nil {
			state = "no answer since"
		}
		return []string{m.styles.Banner.Render(fmt.Sprintf(" %s %s (%s, retrying every %s) ",
			state, m.errSince.Format("15:04:05"), plural(m.failures, "failure"), m.backoff())),
			// The error may quote the router's answer (its status line):
			// escaped like every string from it.
			m.styles.Bad.Render(" " + iostreams.Printable(m.err.Error()))}
	case m.snap != nil && m.snap.Workers.Enabled && !m.snap.Workers.Connected:
		return []string{m.styles.Stale.Render(" discovery is not connected: the fleet view may be out of date ")}
	}
	return []string{""}
}

func (m Model) footer() string {
	k := m.keys
	var parts []string
	for _, b := range []Binding{k.Quit, k.Help, k.NextView, k.Filter, k.Sort, k.Detail, k.Pause} {
		parts = append(parts, b.Label+" "+b.Short)
	}
	return m.styles.Dim.Render(strings.Join(parts, "  "))
}

func (m Model) helpBody() []string {
	out := []string{"", m.styles.Header.Render("  keys")}
	for _, b := range m.keys.all() {
		out = append(out, fmt.Sprintf("  %-8s %s", b.Label, b.Help))
	}
	out = append(out, "", "  1-4 jump to a view · any key closes this help")
	return out
}

// tableHeader renders column titles; tableRow one row, the cursor's
// marked.
func (m Model) tableHeader(cols []column) string {
	head := make([]string, len(cols))
	for i, c := range cols {
		head[i] = cell(c.title, c)
	}
	return m.styles.Header.Render("  " + strings.TrimRight(strings.Join(head, " "), " "))
}

func (m Model) tableRow(vals []string, cols []column, selected bool, style lipgloss.Style) string {
	cells := make([]string, len(cols))
	for i, c := range cols {
		cells[i] = cell(vals[i], c)
	}
	line := strings.TrimRight(strings.Join(cells, " "), " ")
	if selected {
		return m.styles.Cursor.Render("› " + line)
	}
	return "  " + style.Render(line)
}

// window returns at most h of lines, scrolled so that line cursor shows.
func window[T any](lines []T, cursor, h int) []T {
	if h <= 0 {
		return nil
	}
	off := 0
	if cursor >= h {
		off = cursor - h + 1
	}
	off = min(off, max(len(lines)-1, 0))
	return lines[off:min(len(lines), off+h)]
}

type column struct {
	title string
	width int
	right bool
}

func cell(s string, c column) string {
	if n := ansi.StringWidth(s); n > c.width {
		return ansi.Truncate(s, c.width, "…")
	} else if c.right {
		return strings.Repeat(" ", c.width-n) + s
	} else {
		return s + strings.Repeat(" ", c.width-n)
	}
}

// fleetLayout is a set of the fleet view's columns and the widths of its
// two gauges' bars (in the wider layouts a gauge's column holds its bar, a
// space and up to 13 characters of figures; the narrowest may cut large
// figures).
type fleetLayout struct {
	cols         []column
	kvBar, pfBar int
}

// fleetLayouts, widest first: each is used where all of its columns fit
// (see fleetColumns), so that no column is cut off the screen.
var fleetLayouts = []fleetLayout{
	{[]column{{"INSTANCE", 16, false}, {"WORKER ID", 20, false}, {"RANK", 4, true},
		{"DECODE/KV BLOCKS", 30, false}, {"PREFILL TOKENS", 26, false}, {"SEL/S", 6, true},
		{"AGE", 6, true}, {"STATE", 6, false}, {"FIRST SEEN", 19, false}}, 16, 12},
	{[]column{{"INSTANCE", 16, false}, {"WORKER ID", 20, false}, {"RANK", 4, true},
		{"DECODE/KV BLOCKS", 24, false}, {"PREFILL TOKENS", 22, false}, {"SEL/S", 6, true},
		{"AGE", 6, true}, {"STATE", 6, false}}, 10, 8},
	{[]column{{"INSTANCE", 16, false}, {"RK", 3, true}, {"DECODE/KV BLOCKS", 18, false},
		{"PREFILL TOKENS", 16, false}, {"SEL/S", 5, true}, {"AGE", 5, true}, {"STATE", 5, false}}, 8, 6},
}

// lineWidth is what a row of cols takes: the cursor's two columns, the
// cells and a space between each two.
func lineWidth(cols []column) int {
	n := 2 + len(cols) - 1
	for _, c := range cols {
		n += c.width
	}
	return n
}

// fleetColumns is the widest layout that fits w (the narrowest below all).
func (m Model) fleetColumns(w int) (cols []column, kvBar, pfBar int) {
	l := fleetLayouts[len(fleetLayouts)-1]
	for _, f := range fleetLayouts {
		if lineWidth(f.cols) <= w {
			l = f
			break
		}
	}
	return l.cols, l.kvBar, l.pfBar
}

func (m Model) fleetBody(w, h int) []string {
	cols, kvBar, pfBar := m.fleetColumns(w)
	head := "  "
	for _, c := range cols {
		head += cell(c.title, c) + " "
	}
	out := []string{m.styles.Header.Render(strings.TrimRight(head, " "))}
	if len(m.rows) == 0 {
		msg := "  no workers"
		if m.filter != "" {
			msg += " match the filter " + fmt.Sprintf("%q", m.filter)
		}
		return append(out, m.styles.Dim.Render(msg))
	}
	// The lines are laid out first (a row, or a group's header: the row
	// it starts at, negated less one) and only those in the window are
	// drawn: a fleet of tens of thousands of rows costs a layout pass per
	// frame, not a formatted and styled line each.
	layout := make([]int, 0, len(m.rows)+8)
	cursorLine := 0
	for i := range m.rows {
		if i == 0 || !sameGroup(&m.rows[i-1], &m.rows[i]) {
			layout = append(layout, -i-1)
		}
		if i == m.cursor {
			cursorLine = len(layout)
		}
		layout = append(layout, i)
	}
	for _, l := range window(layout, cursorLine, h-1) {
		if l >= 0 {
			out = append(out, m.rowLine(&m.rows[l], l == m.cursor, cols, kvBar, pfBar))
			continue
		}
		first := -l - 1
		n := 1
		for n < len(m.rows)-first && sameGroup(&m.rows[first], &m.rows[first+n]) {
			n++
		}
		out = append(out, m.styles.Group.Render("▾ "+m.rows[first].group()+fmt.Sprintf(" (%d)", n)))
	}
	return out
}

// sameGroup reports whether two rows are of one group (namespace, model,
// role), as group() names it.
func sameGroup(a, b *Row) bool {
	return a.Worker.Namespace == b.Worker.Namespace && a.Worker.Model == b.Worker.Model && a.Worker.Role == b.Worker.Role
}

func (m Model) rowLine(r *Row, selected bool, cols []column, kvBar, pfBar int) string {
	var cells []string
	state, stateStyle := "none", m.styles.None
	ageS := "-"
	kv, pf := "-", "-"
	if l := r.Load; l != nil && l.State != "none" {
		state = l.State
		switch state {
		case "fresh":
			stateStyle = m.styles.Fresh
		case "quiet":
			stateStyle = m.styles.Quiet
		default:
			stateStyle = m.styles.Stale
		}
		ageS = fmtAge(time.Duration(l.AgeMs) * time.Millisecond)
		if n, ok := decodeUsed(l); ok {
			kv = m.gauge(n, r.Worker.Capacity.TotalKVBlocks, kvBar)
		}
		if l.ActivePrefillTokens != nil {
			pf = m.gauge(*l.ActivePrefillTokens, r.Worker.Capacity.MaxNumBatchedTokens, pfBar)
		}
	}
	sel := "-"
	if r.Load != nil {
		sel = fmtRate(r.SelRate)
	}
	for _, c := range cols {
		var v string
		switch c.title {
		case "INSTANCE":
			v = r.Worker.InstanceID
		case "WORKER ID":
			v = r.Worker.WorkerID
		case "RANK", "RK":
			v = fmt.Sprint(r.Rank)
		case "DECODE/KV BLOCKS":
			v = kv
		case "PREFILL TOKENS":
			v = pf
		case "SEL/S":
			v = sel
		case "AGE":
			v = ageS
		case "STATE":
			cells = append(cells, stateStyle.Render(cell(state, c)))
			continue
		case "FIRST SEEN":
			v = strings.Replace(strings.TrimSuffix(r.Worker.FirstSeen, "+00:00"), "T", " ", 1)
		}
		cells = append(cells, cell(v, c))
	}
	prefix := "  "
	line := strings.Join(cells, " ")
	if selected {
		return m.styles.Cursor.Render("› " + ansi.Strip(line))
	}
	return prefix + line
}

// gauge renders used against a capacity as a bar and numbers, or only the
// number when the capacity is unknown.
func (m Model) gauge(used uint64, total *uint64, width int) string {
	if total == nil || *total == 0 {
		return qty(used)
	}
	frac := math.Min(float64(used)/float64(*total), 1)
	full := int(math.Round(frac * float64(width)))
	bar := strings.Repeat("█", full) + strings.Repeat("░", width-full)
	return m.styles.Bar.Render(bar) + " " + qty(used) + "/" + qty(*total)
}

func qty(n uint64) string {
	switch {
	case n < 1000:
		return fmt.Sprint(n)
	case n < 10_000:
		return fmt.Sprintf("%.1fk", float64(n)/1000)
	case n < 1_000_000:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprintf("%.1fM", float64(n)/1e6)
}

func fmtAge(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < 100*time.Second:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 100*time.Minute:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	}
	return fmt.Sprintf("%dh", int(d.Hours()))
}

func (m Model) detailBody() []string {
	r, ok := m.detailRow()
	if !ok {
		return nil
	}
	w := r.Worker
	opt := func(v *uint64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprint(*v)
	}
	opt32 := func(v *uint32) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprint(*v)
	}
	var kv [][2]string
	if m.departed != nil {
		kv = append(kv, [2]string{"status", "left the fleet (gone at " + m.departedAt.Format("15:04:05") + "); what follows is as last seen"})
	}
	kv = append(kv, [][2]string{
		{"instance", w.InstanceID + "  (worker id " + w.WorkerID + ")"}, {"where", w.Namespace + " / " + w.Component + " / " + w.Endpoint},
		{"model", w.Model + "  (" + w.Role + ")"},
		{"dp ranks", fmt.Sprintf("%d..%d (this row: %d)", w.DPStartRank, w.DPStartRank+max(w.DPSize, 1)-1, r.Rank)},
		{"kv blocks", opt(w.Capacity.TotalKVBlocks) + " of " + opt32(w.BlockSize) + " tokens"},
		{"batch", opt(w.Capacity.MaxNumBatchedTokens) + " tokens, " + opt(w.Capacity.MaxNumSeqs) + " seqs"},
		{"context length", opt32(w.Capacity.ContextLength)}, {"first seen", w.FirstSeen}, {"last updated", w.LastUpdated},
	}...)
	if l := r.Load; l != nil {
		age := "-" // no sample yet
		if l.State != "none" {
			age = fmtAge(time.Duration(l.AgeMs) * time.Millisecond)
		}
		kv = append(kv, [2]string{"load state", l.State},
			[2]string{"active decode blocks", opt(l.ActiveDecodeBlocks)},
			[2]string{"active prefill tokens", opt(l.ActivePrefillTokens)},
			[2]string{"kv used blocks", opt(l.KVUsedBlocks)},
			[2]string{"sample age", age},
			[2]string{"selections", fmt.Sprintf("%d (%s/s)", l.Selections, fmtRate(r.SelRate))})
	}
	if len(w.DisaggregatedEndpoint) > 0 && string(w.DisaggregatedEndpoint) != "null" {
		// Raw JSON is kept as sent, not escaped with the snapshot's
		// strings: a JSON string may hold C1 controls and bidi overrides.
		kv = append(kv, [2]string{"bootstrap", iostreams.Printable(string(w.DisaggregatedEndpoint))})
	}
	out := []string{m.styles.Header.Render("  worker detail (enter or esc to close)")}
	for _, p := range kv {
		out = append(out, fmt.Sprintf("  %-22s %s", p[0], p[1]))
	}
	return out
}

func (m Model) subscriptionsBody(h int) []string {
	s := m.snap
	out := []string{fmt.Sprintf("  publishers: %d load, %d kv-events", s.Workers.LoadPublishers, s.Workers.KVEventPublishers)}
	// Every series of a closed label set is exported from the start: only
	// those that counted something are shown.
	if states := nonZero(s.Metrics["continuum_dynamo_load_subscriptions"]); len(states) > 0 {
		var parts []string
		for _, kv := range states {
			parts = append(parts, fmt.Sprintf("%s/%s %g", label(kv.k, "state"), label(kv.k, "transport"), kv.v))
		}
		out = append(out, "  load subscriptions: "+strings.Join(parts, ", "))
	}
	if ev := nonZero(s.Metrics["continuum_dynamo_load_events_total"]); len(ev) > 0 {
		var parts []string
		for _, kv := range ev {
			parts = append(parts, fmt.Sprintf("%s %g", label(kv.k, "result"), kv.v))
		}
		out = append(out, "  load events: "+strings.Join(parts, ", "))
	}
	out = append(out, m.kvLines()...)
	cols := []column{{"FAMILY", 10, false}, {"PUBLISHER", 19, false}, {"NAMESPACE", 9, false}, {"COMPONENT", 9, false},
		{"STATE", 10, false}, {"TRANSPORT", 9, false}}
	for _, sub := range s.Workers.Subscriptions {
		if sub.Broker != "" {
			cols = append(cols, column{"BROKER", 24, false})
			break
		}
	}
	out = append(out, "", m.tableHeader(cols))
	if len(s.Workers.Subscriptions) == 0 {
		return append(out, m.styles.Dim.Render("  no subscriptions"))
	}
	var rows []string
	for i, sub := range s.Workers.Subscriptions {
		style := m.styles.Plain
		if sub.State != "connected" {
			style = m.styles.Stale
		}
		vals := []string{sub.Family, sub.PublisherID, sub.Namespace, sub.Component, sub.State, sub.Transport, sub.Broker}
		rows = append(rows, m.tableRow(vals, cols, i == m.cursor, style))
	}
	return append(out, window(rows, m.cursor, h-len(out))...)
}

// kvLines summarise the kv-events subscriptions, their events and the
// index, from the KV families (none from a router without KV-aware
// selection).
func (m Model) kvLines() []string {
	s := m.snap
	if _, on := s.Metrics["continuum_dynamo_kv_selection_total"]; !on {
		return nil
	}
	var out []string
	var parts []string
	for _, kv := range sortedSeries(s.Metrics["continuum_dynamo_kv_subscriptions"]) {
		if kv.v > 0 {
			parts = append(parts, fmt.Sprintf("%s/%s %g", label(kv.k, "state"), label(kv.k, "transport"), kv.v))
		}
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	out = append(out, "  kv-events subscriptions: "+strings.Join(parts, ", "))
	parts = nil
	for _, kv := range sortedSeries(s.Metrics["continuum_dynamo_kv_events_total"]) {
		if kv.v > 0 {
			parts = append(parts, fmt.Sprintf("%s %g", label(kv.k, "result"), kv.v))
		}
	}
	if len(parts) == 0 {
		parts = []string{"none yet (workers publish on change only)"}
	}
	out = append(out, "  kv events: "+strings.Join(parts, ", "))
	out = append(out, fmt.Sprintf("  kv index: %s blocks, %s ownerships, %s",
		qty(uint64(s.Metric("continuum_dynamo_kv_index_nodes", ""))), qty(uint64(s.Metric("continuum_dynamo_kv_index_ownerships", ""))),
		byteQty(s.Metric("continuum_dynamo_kv_index_bytes", ""))))
	return out
}

// byteQty renders a byte count in KiB or MiB.
func byteQty(b float64) string {
	switch {
	case b < 1<<10:
		return fmt.Sprintf("%g B", b)
	case b < 1<<20:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", b/(1<<20))
}

type series struct {
	k string
	v float64
}

func sortedSeries(m map[string]float64) []series {
	out := make([]series, 0, len(m))
	for k, v := range m {
		out = append(out, series{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].k < out[j].k })
	return out
}

// nonZero is sortedSeries without the series at zero: the router exports
// every value of a closed label set before it counts any.
func nonZero(m map[string]float64) []series {
	out := sortedSeries(m)
	return slices.DeleteFunc(out, func(s series) bool { return s.v == 0 })
}

var sparks = []rune("▁▂▃▄▅▆▇█")

func sparkline(h []float64, width int) string {
	if len(h) > width {
		h = h[len(h)-width:]
	}
	peak := 0.0
	for _, v := range h {
		peak = max(peak, v)
	}
	var b strings.Builder
	for range width - len(h) {
		b.WriteRune(' ')
	}
	for _, v := range h {
		i := 0
		if peak > 0 {
			i = int(math.Round(v / peak * float64(len(sparks)-1)))
		}
		b.WriteRune(sparks[i])
	}
	return b.String()
}

func (m Model) routingBody(w int) []string {
	sw := max(min(historyLen, w-62), 8)
	var out []string
	section := func(title, family string, name func(string) string) {
		out = append(out, m.styles.Header.Render("  "+title))
		ss := nonZero(m.snap.Metrics[family])
		if len(ss) == 0 {
			out = append(out, m.styles.Dim.Render("  none yet"))
		}
		for _, kv := range ss {
			h := m.hist[family+"{"+kv.k+"}"]
			rate := 0.0
			if len(h) > 0 {
				rate = h[len(h)-1]
			}
			out = append(out, fmt.Sprintf("  %-26s %s %7s/s %10g total", name(kv.k), m.styles.Bar.Render(sparkline(h, sw)), fmtRate(rate), kv.v))
		}
		out = append(out, "")
	}
	section("selections by role and reason", "continuum_dynamo_selection_total", func(k string) string {
		return label(k, "role") + " " + label(k, "reason")
	})
	section("requests by routing path", "disaggregated_requests_total", func(k string) string { return label(k, "routing_path") })
	section("errors by phase", "disaggregated_errors_total", func(k string) string { return label(k, "phase") })
	m.kvSection(&out, sw)
	return out
}

// kvSection adds the KV-aware selections by result (overlap, no_overlap,
// tokenizer_unavailable, ...): the results that happened, each with its
// rate over time.
func (m Model) kvSection(out *[]string, sw int) {
	const family = "continuum_dynamo_kv_selection_total"
	*out = append(*out, m.styles.Header.Render("  KV-aware selections by result"))
	all, on := m.snap.Metrics[family]
	if !on {
		*out = append(*out, m.styles.Dim.Render("  off (dynamo.kv.enabled is false)"))
		return
	}
	n := 0
	for _, kv := range sortedSeries(all) {
		if kv.v <= 0 {
			continue
		}
		n++
		h := m.hist[family+"{"+kv.k+"}"]
		rate := 0.0
		if len(h) > 0 {
			rate = h[len(h)-1]
		}
		*out = append(*out, fmt.Sprintf("  %-26s %s %7s/s %10g total", label(kv.k, "result"), m.styles.Bar.Render(sparkline(h, sw)), fmtRate(rate), kv.v))
	}
	if n == 0 {
		*out = append(*out, m.styles.Dim.Render("  none yet"))
	}
}

func (m Model) problemsBody(w, h int) []string {
	s := m.snap
	cols := []column{{"KIND", 18, false}, {"KEYS", 5, true}, {"REASON", max(w-28, 20), false}}
	if w >= wide {
		cols = []column{{"KIND", 18, false}, {"KEYS", 5, true}, {"REASON", 60, false}, {"FIRST KEY", max(w-90, 20), false}}
	}
	out := []string{m.tableHeader(cols)}
	if len(s.Problems.Problems) == 0 {
		out = append(out, m.styles.Dim.Render("  no problems"))
	}
	var rows []string
	for i, p := range s.Problems.Problems {
		first := ""
		if len(p.Keys) > 0 {
			first = p.Keys[0]
			if last := cols[len(cols)-1]; last.title == "FIRST KEY" {
				// A key too wide keeps its end: the instance id that
				// tells two records apart, not the prefix they share.
				if n := ansi.StringWidth(first); n > last.width {
					first = ansi.TruncateLeft(first, n-last.width+1, "…")
				}
			}
		}
		rows = append(rows, m.tableRow([]string{p.Kind, fmt.Sprint(p.KeyCount), p.Reason, first}, cols, i == m.cursor, m.styles.Bad))
	}
	// The events below keep a few lines; the problems scroll in the rest.
	ev := nonZero(s.Metrics["continuum_dynamo_discovery_events_total"])
	out = append(out, window(rows, m.cursor, max(h-len(out)-3-min(max(len(ev), 1), 4), 3))...)
	out = append(out, "", m.styles.Header.Render("  discovery events"))
	if len(ev) == 0 {
		out = append(out, m.styles.Dim.Render("  none"))
	}
	for _, kv := range ev {
		recent := ""
		if m.prev != nil {
			if d := kv.v - m.prev.Metrics["continuum_dynamo_discovery_events_total"][kv.k]; d > 0 {
				recent = m.styles.Stale.Render(fmt.Sprintf("  +%g since the last poll", d))
			}
		}
		out = append(out, fmt.Sprintf("  %-18s %8g%s", label(kv.k, "kind"), kv.v, recent))
	}
	return out
}

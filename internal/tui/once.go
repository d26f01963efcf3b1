package tui

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"github.com/continuum-router/continuum/internal/admin"
)

// OnceRow is one (worker, rank) in `top --once -o json`.
type OnceRow struct {
	Namespace  string            `json:"namespace"`
	Model      string            `json:"model"`
	Role       string            `json:"role"`
	InstanceID string            `json:"instance_id"`
	WorkerID   string            `json:"worker_id"`
	DPRank     uint32            `json:"dp_rank"`
	Capacity   admin.Capacity    `json:"capacity"`
	Load       *admin.LoadSample `json:"load"`
	// SelectionsPerSecond is the router's picks of the rank a second
	// over the interval between the last two polls.
	SelectionsPerSecond float64 `json:"selections_per_s"`
	FirstSeen           string  `json:"first_seen"`
	LastUpdated         string  `json:"last_updated"`
}

// Once is the document `top --once -o json` prints.
type Once struct {
	Router        string               `json:"router"`
	At            string               `json:"at"`
	Source        string               `json:"source"`
	Connected     bool                 `json:"connected"`
	Generation    uint64               `json:"generation"`
	Workers       []OnceRow            `json:"workers"`
	Subscriptions []admin.Subscription `json:"subscriptions"`
	Problems      []admin.Problem      `json:"problems"`
	// Counters holds top's metric families: family → "k=v,..." → value.
	Counters map[string]map[string]float64 `json:"counters"`
}

// Once returns the model's last poll as a document (rows in view order),
// its strings as the router sent them: the JSON encoder escapes what a
// reader needs escaped.
func (m Model) Once() (Once, error) { return m.document(m.raw) }

// document is the last poll as s holds it: the raw answer or the one
// escaped for the terminal.
func (m Model) document(s *Snapshot) (Once, error) {
	if s == nil {
		if m.err != nil {
			return Once{}, m.err
		}
		return Once{}, fmt.Errorf("no snapshot of %s", m.opts.Router)
	}
	o := Once{Router: m.opts.Router, At: s.At.UTC().Format(admin.TimeFormat), Source: s.Workers.Source,
		Connected: s.Workers.Connected, Generation: s.Workers.Generation, Workers: []OnceRow{},
		Subscriptions: s.Workers.Subscriptions, Problems: s.Problems.Problems, Counters: s.Metrics}
	if o.Subscriptions == nil {
		o.Subscriptions = []admin.Subscription{}
	}
	if o.Problems == nil {
		o.Problems = []admin.Problem{}
	}
	for _, r := range m.rows {
		w := s.Workers.Workers[r.worker]
		var load *admin.LoadSample
		if r.sample >= 0 {
			load = &s.Load.Samples[r.sample]
		}
		o.Workers = append(o.Workers, OnceRow{Namespace: w.Namespace, Model: w.Model, Role: w.Role, InstanceID: w.InstanceID,
			WorkerID: w.WorkerID, DPRank: r.Rank, Capacity: w.Capacity, Load: load, SelectionsPerSecond: math.Round(r.SelRate*100) / 100,
			FirstSeen: w.FirstSeen, LastUpdated: w.LastUpdated})
	}
	return o, nil
}

// WriteJSON prints the snapshot as indented JSON.
func (m Model) WriteJSON(w io.Writer) error {
	o, err := m.Once()
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(o)
}

// WriteTable prints the fleet view as a plain table, one row per rank,
// its strings escaped as the views draw them.
func (m Model) WriteTable(w io.Writer) error {
	o, err := m.document(m.snap)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tMODEL\tROLE\tINSTANCE\tRANK\tDECODE/KV\tPREFILL\tSTATE\tAGE\tSELECTIONS\tSEL/S")
	for _, r := range o.Workers {
		kv, pf, state, age, sel, rate := "-", "-", "-", "-", "-", "-"
		if l := r.Load; l != nil {
			sel, rate = fmt.Sprint(l.Selections), fmtRate(r.SelectionsPerSecond)
			state = l.State
			if l.State != "none" {
				age = fmt.Sprintf("%dms", l.AgeMs)
				if n, ok := decodeUsed(l); ok {
					kv = ratio(n, r.Capacity.TotalKVBlocks)
				}
				if l.ActivePrefillTokens != nil {
					pf = ratio(*l.ActivePrefillTokens, r.Capacity.MaxNumBatchedTokens)
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Namespace, r.Model, r.Role, r.InstanceID, r.DPRank, kv, pf, state, age, sel, rate)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(o.Problems) > 0 {
		fmt.Fprintf(w, "\n%s:\n", plural(len(o.Problems), "problem"))
		for _, p := range o.Problems {
			fmt.Fprintf(w, "  %s (%d keys): %s\n", p.Kind, p.KeyCount, p.Reason)
		}
	}
	return nil
}

func ratio(n uint64, total *uint64) string {
	if total == nil {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%d/%d", n, *total)
}

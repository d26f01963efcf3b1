// Package tui is `continuum top`: a bubbletea model of a router's fleet view,
// its views, keymap and styles, and the client that polls the admin API and
// /metrics. Update is pure; every request runs inside a tea.Cmd.
//
// Imports: the admin API types only.
package tui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/continuum-router/continuum/internal/admin"
)

// MaxBody bounds each response read from the router.
const MaxBody = 32 << 20

// Snapshot is one poll of the router: its fleet view, latest load samples,
// problems and the metric families top reads.
type Snapshot struct {
	At       time.Time
	Workers  admin.WorkersResponse
	Load     admin.LoadResponse
	Problems admin.ProblemsResponse
	// Counters and gauges by family, then by sorted "k=v,k=v" label set.
	Metrics map[string]map[string]float64
}

// Metric returns a series' value (0 when absent).
func (s *Snapshot) Metric(family, labels string) float64 { return s.Metrics[family][labels] }

// Client polls one router.
type Client struct {
	Base  string
	Token string
	// HTTP sends the requests; nil: a client that follows no redirect
	// (Go's keeps the Authorization field across one to the same host on
	// another port or scheme, which would send the admin token in clear;
	// a redirect shows as the error it is).
	HTTP *http.Client
}

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// Fetch takes one snapshot, its strings as the router sent them (the model
// escapes them for the terminal). Its error says which request failed and why, in
// words an operator can act on (unreachable, unauthorized, bad response).
func (c *Client) Fetch(ctx context.Context, now time.Time) (*Snapshot, error) {
	s := &Snapshot{At: now}
	if err := c.getJSON(ctx, "/admin/dynamo/workers", &s.Workers); err != nil {
		return nil, err
	}
	if err := c.getJSON(ctx, "/admin/dynamo/load", &s.Load); err != nil {
		return nil, err
	}
	if err := c.getJSON(ctx, "/admin/dynamo/problems", &s.Problems); err != nil {
		return nil, err
	}
	body, err := c.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	s.Metrics, err = ParseMetrics(body)
	if err != nil {
		return nil, fmt.Errorf("bad response from /metrics: %w", err)
	}
	return s, nil
}

func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	body, err := c.get(ctx, path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("bad response from %s: %w", path, err)
	}
	return nil
}

func (c *Client) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.Base, "/")+path, nil)
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = noRedirects
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%s: timed out", path)
		}
		return nil, fmt.Errorf("router unreachable: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxBody))
		return nil, fmt.Errorf("%s: %s (check --token)", path, resp.Status)
	case resp.StatusCode != http.StatusOK:
		// The router says why in an error body ("the admin API is off:
		// set admin.token"); its message, cut short, follows the status.
		head, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxBody))
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		hint := ""
		if loc := resp.Header.Get("Location"); resp.StatusCode >= 300 && resp.StatusCode <= 399 && loc != "" {
			hint = " (redirected to " + loc + ", not followed: give that address with --router)"
		}
		if resp.StatusCode == http.StatusNotFound {
			hint = " (is the admin API on, and on this address? admin.token, admin.bind_address)"
		}
		if json.Unmarshal(head, &e) == nil && e.Error.Message != "" {
			msg := e.Error.Message
			if r := []rune(msg); len(r) > 200 {
				msg = string(r[:200]) + "…"
			}
			if strings.Contains(msg, "admin") {
				hint = "" // the router's own reason says it
			}
			return nil, fmt.Errorf("%s: %s: %s%s", path, resp.Status, msg, hint)
		}
		return nil, fmt.Errorf("%s: %s%s", path, resp.Status, hint)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(body) > MaxBody {
		return nil, fmt.Errorf("%s: response over %d bytes", path, MaxBody)
	}
	return body, nil
}

// families are the metric families top reads; the rest are skipped.
var families = map[string]bool{
	"continuum_dynamo_selection_total":        true,
	"disaggregated_requests_total":            true,
	"disaggregated_errors_total":              true,
	"continuum_dynamo_load_events_total":      true,
	"continuum_dynamo_load_subscriptions":     true,
	"continuum_dynamo_discovery_events_total": true,
	"continuum_dynamo_discovery_connected":    true,
	"continuum_http_requests_total":           true,
	// KV-aware selection; absent from a router that does not run it.
	"continuum_dynamo_kv_selection_total":  true,
	"continuum_dynamo_kv_subscriptions":    true,
	"continuum_dynamo_kv_events_total":     true,
	"continuum_dynamo_kv_index_nodes":      true,
	"continuum_dynamo_kv_index_ownerships": true,
	"continuum_dynamo_kv_index_bytes":      true,
}

// ParseMetrics reads the Prometheus text format and keeps top's families.
func ParseMetrics(body []byte) (map[string]map[string]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]float64{}
	for name, mf := range mfs {
		if !families[name] {
			continue
		}
		series := map[string]float64{}
		for _, m := range mf.GetMetric() {
			series[labelKey(m.GetLabel())] = value(mf.GetType(), m)
		}
		out[name] = series
	}
	return out, nil
}

func value(t dto.MetricType, m *dto.Metric) float64 {
	switch t {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	default:
		return m.GetUntyped().GetValue()
	}
}

func labelKey(ls []*dto.LabelPair) string {
	parts := make([]string, 0, len(ls))
	for _, l := range ls {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// label returns one label's value from a "k=v,k=v" key.
func label(key, name string) string {
	for _, kv := range strings.Split(key, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

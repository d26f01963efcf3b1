package faultbench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/fleetsim"
)

// Scenario kinds: how a fault ends and what "whole again" means.
const (
	kindKill     = iota // a worker killed; restarted once discovery dropped it
	kindHold            // a worker fault held for Options.Hold, then resumed
	kindFrontend        // a frontend replica killed for Options.Hold, then restarted
	kindEtcd            // etcd restarted; nothing to undo
)

// scenario is one fault: what it does to which part.
type scenario struct {
	name, fault string
	kind        int
	// role picks the faulty workers: "decode" or "prefill" (the first of
	// that role), "all", or "" (no worker).
	role string
	// inject and repair are the control API faults on each faulty worker.
	inject, repair fleetsim.Fault
}

var scenarios = []scenario{
	{name: "decode-killed", fault: "a decode worker killed (restarted once discovery dropped it)", kind: kindKill, role: "decode", inject: fleetsim.FaultKill, repair: fleetsim.FaultRestart},
	{name: "prefill-killed", fault: "a prefill worker killed (restarted once discovery dropped it)", kind: kindKill, role: "prefill", inject: fleetsim.FaultKill, repair: fleetsim.FaultRestart},
	{name: "engine-paused", fault: "a decode engine stalled: requests hang, no load published", kind: kindHold, role: "decode", inject: fleetsim.FaultPause, repair: fleetsim.FaultResume},
	{name: "publisher-silenced", fault: "a decode worker's load publisher silenced", kind: kindHold, role: "decode", inject: fleetsim.FaultStopPublisher, repair: fleetsim.FaultResume},
	{name: "etcd-restarted", fault: "the etcd server restarted", kind: kindEtcd},
	{name: "frontend-killed", fault: "one of the two frontend replicas killed, then restarted", kind: kindFrontend},
	{name: "duplicate-record", fault: "a second record claiming a decode worker's instance id", kind: kindHold, role: "decode", inject: fleetsim.FaultDuplicate, repair: fleetsim.FaultResume},
	{name: "all-saturated", fault: "every worker's load says its KV cache is full", kind: kindHold, role: "all", inject: fleetsim.FaultSaturate, repair: fleetsim.FaultResume},
}

// RunScenario runs one scenario on a fresh fleet and router.
func RunScenario(ctx context.Context, o Options, name string) (Result, error) {
	o = o.WithDefaults()
	i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == name })
	if i < 0 {
		return Result{}, fmt.Errorf("unknown scenario %q: want one of %s", name, strings.Join(Scenarios(), ", "))
	}
	sc := scenarios[i]
	e, err := startEnv(ctx, o)
	if err != nil {
		return Result{}, err
	}
	defer e.close()
	return e.run(ctx, sc)
}

// phases are the times a scenario's report is cut by.
type phases struct {
	loadStart, fault, repair, whole, end time.Time
}

func (e *env) run(ctx context.Context, sc scenario) (Result, error) {
	o := e.o
	res := Result{Scenario: sc.name, Fault: sc.fault, DroppedMS: -1, ExcludedMS: -1}
	var victims []string
	switch sc.role {
	case "decode", "prefill":
		victims = e.workers[sc.role][:1]
	case "all":
		victims = append(slices.Clone(e.workers["prefill"]), e.workers["decode"]...)
	}
	killedReplica := e.replicas[len(e.replicas)-1]
	var etcdBack time.Time

	l := startLoad(ctx, e.router, model, o.Rate, o.MaxTokens)
	var ph phases
	ph.loadStart = time.Now()
	stopped := false
	defer func() {
		if !stopped {
			l.stop()
		}
	}()
	if err := sleep(ctx, o.Baseline); err != nil {
		return res, err
	}
	o.Logger.Info("fault", "scenario", sc.name)
	ph.fault = time.Now()
	switch sc.kind {
	case kindKill, kindHold:
		for _, v := range victims {
			if err := e.inject(ctx, v, sc.inject); err != nil {
				return res, err
			}
		}
	case kindFrontend:
		if err := e.post(ctx, "/sim/frontends/"+killedReplica+"/kill"); err != nil {
			return res, err
		}
	case kindEtcd:
		// The call returns once etcd serves again (it stops gracefully,
		// seconds under load): how long discovery then takes is the
		// router's.
		if err := e.post(ctx, "/sim/etcd/restart"); err != nil {
			return res, err
		}
		etcdBack = time.Now()
		res.OutageMS = ms(etcdBack.Sub(ph.fault))
	}

	// Hold the fault: until discovery drops a killed worker, or Hold.
	switch sc.kind {
	case kindKill:
		at, err := poll(ctx, o.LeaseTTL+30*time.Second, 20*time.Millisecond, func() bool {
			v, err := e.routerWorkers(ctx)
			return err == nil && !slices.ContainsFunc(v.Workers, func(w admin.Worker) bool { return w.WorkerID == victims[0] })
		})
		if err != nil {
			return res, fmt.Errorf("the router still lists the killed worker %s %v after the kill: %w", victims[0], time.Since(ph.fault), err)
		}
		res.DroppedMS = ms(at.Sub(ph.fault))
	case kindHold, kindFrontend:
		if err := sleep(ctx, o.Hold); err != nil {
			return res, err
		}
	}

	// What the faulty part received during the fault, then the repair.
	before, err := e.simWorkers(ctx)
	if err != nil {
		return res, err
	}
	var lastPin time.Time
	for _, w := range before {
		if slices.Contains(victims, strconv.FormatUint(w.InstanceID, 10)) && w.LastPin != nil && w.LastPin.After(ph.fault) && w.LastPin.After(lastPin) {
			lastPin = *w.LastPin
		}
	}
	if len(victims) > 0 {
		res.ExcludedMS = 0
		if !lastPin.IsZero() {
			res.ExcludedMS = ms(lastPin.Sub(ph.fault))
		}
	}
	replicaRequests := uint64(0)
	ph.repair = time.Now()
	switch sc.kind {
	case kindKill, kindHold:
		for _, v := range victims {
			if err := e.inject(ctx, v, sc.repair); err != nil {
				return res, err
			}
		}
	case kindFrontend:
		fs, err := e.frontends(ctx)
		if err != nil {
			return res, err
		}
		for _, f := range fs {
			if f.Name == killedReplica {
				replicaRequests = f.Requests
			}
		}
		ph.repair = time.Now()
		if err := e.post(ctx, "/sim/frontends/"+killedReplica+"/restart"); err != nil {
			return res, err
		}
	case kindEtcd:
		ph.repair = etcdBack // etcd serving again is the repair
	}

	// Whole again: every worker listed with its subscription connected,
	// and each faulty part receiving requests again.
	whole, err := poll(ctx, o.LeaseTTL+30*time.Second, 20*time.Millisecond, func() bool {
		v, err := e.routerWorkers(ctx)
		if err != nil || !v.Connected || len(v.Workers) != o.Prefill+o.Decode {
			return false
		}
		switch sc.kind {
		case kindFrontend:
			fs, err := e.frontends(ctx)
			if err != nil {
				return false
			}
			return slices.ContainsFunc(fs, func(f fleetsim.FrontendReplica) bool { return f.Name == killedReplica && f.Requests > replicaRequests })
		case kindEtcd:
			return slices.ContainsFunc(l.results(), func(r outcome) bool { return r.start.After(ph.repair) && !r.failed() })
		}
		ws, err := e.simWorkers(ctx)
		if err != nil {
			return false
		}
		for _, w := range ws {
			if slices.Contains(victims, strconv.FormatUint(w.InstanceID, 10)) && (w.LastPin == nil || !w.LastPin.After(ph.repair)) {
				return false
			}
		}
		return true
	})
	res.Recovered = err == nil
	if res.Recovered {
		ph.whole = whole
		res.RecoveredMS = ms(whole.Sub(ph.repair))
	} else {
		ph.whole = time.Now()
		res.RecoveredMS = ms(ph.whole.Sub(ph.repair))
	}
	// A short tail of load on the whole fleet, then the report.
	if err := sleep(ctx, min(o.Baseline, 2*time.Second)); err != nil {
		return res, err
	}
	outcomes := l.stop()
	stopped = true
	ph.end = time.Now()
	res.NotSent = l.notSent()

	after, err := e.simWorkers(ctx)
	if err != nil {
		return res, err
	}
	for _, w := range after {
		if !slices.Contains(victims, strconv.FormatUint(w.InstanceID, 10)) {
			continue
		}
		for _, d := range w.PinsAfterGoneMS {
			if d > ms(expiryGrace) {
				res.PinnedAfterExpiry++
			}
			res.LatestPinAfterExpiryMS = max(res.LatestPinAfterExpiryMS, d)
		}
		if extra := int(w.PinsAfterGone) - len(w.PinsAfterGoneMS); extra > 0 {
			res.PinnedAfterExpiry += extra // past the kept times: later still
		}
	}
	if res.Repins, err = e.metricSum(ctx, "continuum_dynamo_repin_total"); err != nil {
		return res, err
	}
	e.tally(&res, sc, outcomes, ph, victims, killedReplica)
	res.OK = res.Unexpected == 0 && res.PinnedAfterExpiry == 0 && res.Recovered && res.RecoveredMS < ms(o.LeaseTTL)
	return res, nil
}

// tally counts the outcomes and the latencies of the phases.
func (e *env) tally(res *Result, sc scenario, outcomes []outcome, ph phases, victims []string, killedReplica string) {
	res.Causes = map[string]int{}
	var base, during []float64
	for _, r := range outcomes {
		res.Sent++
		lat := ms(r.end.Sub(r.start))
		switch {
		case r.start.Before(ph.fault):
			base = append(base, lat)
		case !r.start.After(ph.whole):
			during = append(during, lat)
		}
		if !r.failed() {
			continue
		}
		res.Failed++
		res.Causes[r.cause]++
		switch sc.kind {
		case kindKill:
			// A stream the killed worker was answering when it died is cut
			// with it: the router aborts the client's answer (read as cut
			// before its end) or ends it without [DONE]. A request sent to
			// the worker after it died is the router's failure.
			inFlight := r.start.Before(ph.fault) && r.end.After(ph.fault)
			if inFlight && r.stream && (r.cause == "stream cut" || r.cause == "answer cut") &&
				(slices.Contains(victims, r.worker) || slices.Contains(victims, r.prefill)) {
				res.InFlightOnKilled++
			}
		case kindFrontend:
			// A request in flight through the killed replica dies with
			// its connection (the router cannot know how far it got).
			if r.start.Before(ph.fault) && r.end.After(ph.fault) && (r.backend == killedReplica || r.backend == "") {
				res.InFlightOnKilled++
			}
		}
	}
	res.Unexpected = res.Failed - res.InFlightOnKilled
	res.BaselineP99, res.FaultP99 = p99(base), p99(during)
}

func p99(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[min(len(v)-1, int(float64(len(v))*0.99))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// maxControlAnswer bounds a control or admin answer read.
const maxControlAnswer = 16 << 20

// client calls the control and admin APIs; an etcd restart under load takes
// seconds.
var client = &http.Client{Timeout: time.Minute}

func (e *env) get(ctx context.Context, url, token string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxControlAnswer))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, data)
	}
	return json.Unmarshal(data, v)
}

func (e *env) post(ctx context.Context, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.control+path, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusNoContent {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, data)
	}
	return nil
}

func (e *env) inject(ctx context.Context, id string, f fleetsim.Fault) error {
	return e.post(ctx, "/sim/workers/"+id+"/"+string(f))
}

func (e *env) routerWorkers(ctx context.Context) (admin.WorkersResponse, error) {
	var v admin.WorkersResponse
	return v, e.get(ctx, e.router+"/admin/dynamo/workers", fleetsim.DemoAdminToken, &v)
}

func (e *env) simWorkers(ctx context.Context) ([]fleetsim.WorkerInfo, error) {
	var v []fleetsim.WorkerInfo
	return v, e.get(ctx, e.control+"/sim/workers", "", &v)
}

func (e *env) frontends(ctx context.Context) ([]fleetsim.FrontendReplica, error) {
	var v []fleetsim.FrontendReplica
	return v, e.get(ctx, e.control+"/sim/frontends", "", &v)
}

// metricSum sums the router's series of a metric family.
func (e *env) metricSum(ctx context.Context, family string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.router+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	sum := 0.0
	sc := bufio.NewScanner(io.LimitReader(resp.Body, maxControlAnswer))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, family+"{") && !strings.HasPrefix(line, family+" ") {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err == nil {
				sum += v
			}
		}
	}
	return sum, sc.Err()
}

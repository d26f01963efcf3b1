package router

import (
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/shim"
)

// repin pins a request again after its pinned dispatch (pin) failed,
// before any byte reached the client, with an answer that says a pinned
// worker is gone or refused (res.repin). It returns nil when no other
// worker can take it (none left, or every one busy): the failure then
// stands and is handled as any other.
//
// The workers it failed on are excluded from now on. An answer that names
// the failed worker, or an aggregated pin, says which. One that does not,
// for a prefill/decode pair, blames the worker of the pair that served a
// pinned request less recently (a worker that has just served is alive);
// when neither has, both, unless that leaves no prefill worker that can
// take it (none left, or every one busy), in which case only the decode
// worker.
func (x *exchange) repin(req *shim.Request[*Backend], res sendResult, pin *pick.Pin) *shim.Dispatch[*Backend] {
	tries := [][]fleet.WorkerID{res.blame}
	if !res.named && pin.Prefill != nil && len(res.blame) == 2 {
		decode := x.s.picks.lastServed(load.RankOf(pin.Decode.Worker, pin.Decode.DPRank))
		prefill := x.s.picks.lastServed(load.RankOf(pin.Prefill.Worker, pin.Prefill.DPRank))
		switch {
		case prefill.After(decode):
			tries = [][]fleet.WorkerID{res.blame[:1]}
		case decode.After(prefill):
			tries = [][]fleet.WorkerID{res.blame[1:]}
		default:
			tries = append(tries, res.blame[:1])
		}
	}
	base := len(req.Exclude)
	for _, blame := range tries {
		req.Exclude = append(req.Exclude[:base], blame...)
		d, err := x.s.dispatch.Reserve(x.s.opts.Registry.Snapshot(), *req, x.s.opts.Now())
		if err == nil {
			x.s.opts.Metrics.Repins.WithLabelValues(res.repin).Inc()
			return d
		}
		// No pair without both (none left, or every one left busy): the
		// next try keeps the prefill worker, which may be the free one.
	}
	req.Exclude = req.Exclude[:base]
	return nil
}

// served records that a pinned dispatch was answered: its workers are
// alive.
func (x *exchange) served(pin *pick.Pin) {
	now := x.s.opts.Now()
	x.s.picks.served(load.RankOf(pin.Decode.Worker, pin.Decode.DPRank), now)
	if p := pin.Prefill; p != nil {
		x.s.picks.served(load.RankOf(p.Worker, p.DPRank), now)
	}
}

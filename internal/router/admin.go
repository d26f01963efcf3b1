package router

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
)

// mountAdmin adds the admin API to mux. On the main listener (onMain) it
// answers only while admin.bind_address is empty, so that a reload moving
// the admin API to its own listener, or back, takes effect at once.
func (s *Server) mountAdmin(mux *http.ServeMux, onMain bool) {
	h := func(f http.HandlerFunc) http.Handler {
		next := s.adminAuth(f)
		if !onMain {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s.cfg.Load().Admin.BindAddress != "" {
				writeError(w, http.StatusNotFound, CodeNotFound, "no such route")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	mux.Handle("GET /admin/dynamo/workers", h(s.adminWorkers))
	mux.Handle("GET /admin/config", h(s.adminConfig))
	mux.Handle("PUT /admin/config", h(s.adminImportConfig))
	mux.Handle("GET /admin/config/status", h(s.adminConfigStatus))
	mux.Handle("GET /admin/dynamo/load", h(s.adminLoad))
	mux.Handle("GET /admin/dynamo/problems", h(s.adminProblems))
	mux.Handle("GET /admin/dynamo/kv", h(s.adminKV))
}

// adminImportConfig reloads from the document in the body: 200 with what
// the reload did, 422 with why it was refused (the running configuration
// stays). Secrets sent back as the mask keep their running values.
func (s *Server) adminImportConfig(w http.ResponseWriter, r *http.Request) {
	if s.opts.ImportConfig == nil {
		writeError(w, http.StatusNotFound, CodeNotFound, "this router does not reload its configuration")
		return
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, config.MaxFileBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, CodeBadRequest, fmt.Sprintf("a configuration document is at most %d bytes", config.MaxFileBytes))
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, CodeBadRequest, "could not read the request body")
		return
	}
	res := s.opts.ImportConfig(data)
	w.Header().Set("Content-Type", "application/json")
	if res.Result != admin.ReloadApplied {
		w.WriteHeader(http.StatusUnprocessableEntity)
	}
	_ = json.NewEncoder(w).Encode(res)
}

// adminConfigStatus is the running configuration's generation and the last
// reload.
func (s *Server) adminConfigStatus(w http.ResponseWriter, _ *http.Request) {
	st := admin.ConfigStatus{Generation: 1}
	if s.opts.ConfigStatus != nil {
		st = s.opts.ConfigStatus()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
}

// adminKV is the KV index's view of the workers' caches; enabled is false
// without KV-aware selection.
func (s *Server) adminKV(w http.ResponseWriter, _ *http.Request) {
	resp := admin.KVResponse{Ranks: []admin.KVRank{}, Subscriptions: []admin.Subscription{}, Events: []admin.KVCount{}, Results: []admin.KVCount{}}
	if s.opts.KV != nil {
		resp = s.opts.KV()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// adminLoad lists every live worker rank with its latest sample (state
// "none" before the first) and how often the router picked it: at most
// admin.MaxRanks of them, as many as the load store holds (cards may
// declare up to 1,024 ranks each), the rest counted.
func (s *Server) adminLoad(w http.ResponseWriter, _ *http.Request) {
	resp := admin.LoadResponse{Samples: []admin.LoadSample{}}
	if s.opts.Store != nil && s.opts.Registry != nil {
		maxAge := s.opts.Store.MaxStaleness()
		resp.MaxStalenessMs = maxAge.Milliseconds()
		now := s.opts.Now()
		snap := s.opts.Registry.Snapshot()
		picks := s.picks.snapshot(liveRanks(snap))
		for wk := range snap.Workers.All() {
			size := max(wk.DPSize, 1)
			if left := admin.MaxRanks - len(resp.Samples); int(size) > left {
				resp.OmittedRanks += int64(int(size) - left)
				size = uint32(left)
			}
			for r := range size {
				rank := wk.DPStartRank + r
				row := admin.LoadSample{WorkerID: wk.WorkerIDDecimal(), Namespace: wk.ID.Namespace, DPRank: rank,
					Selections: picks[load.RankOf(wk, rank)], State: "none"}
				smp, ok := s.opts.Store.Latest(load.RankOf(wk, rank))
				if !ok {
					resp.Samples = append(resp.Samples, row)
					continue
				}
				age := now.Sub(smp.ReceivedAt)
				state := "fresh"
				if age > maxAge {
					// As the picker reads it: quiet when the backlog of
					// the worker's phase was 0, else left out.
					state = "stale"
					if b := smp.Backlog(wk.Role == fleet.RolePrefill); b != nil && *b == 0 {
						state = "quiet"
					}
				}
				row.ActiveDecodeBlocks, row.ActivePrefillTokens, row.KVUsedBlocks = smp.Load.ActiveDecodeBlocks, smp.Load.ActivePrefillTokens, smp.Load.KVUsedBlocks
				row.AgeMs, row.State = age.Milliseconds(), state
				resp.Samples = append(resp.Samples, row)
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// adminProblems lists why records are not (all of) a routable worker.
func (s *Server) adminProblems(w http.ResponseWriter, _ *http.Request) {
	resp := admin.ProblemsResponse{Problems: []admin.Problem{}}
	if s.opts.Registry != nil {
		resp.Generation = s.opts.Registry.Generation()
		_, _, resp.Problems = admin.Views(s.opts.Registry.Snapshot())
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// adminAuth checks the bearer token in constant time and writes one audit
// line per call. Without admin.token the admin API does not exist.
func (s *Server) adminAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := s.cfg.Load().Admin.Token
		if token == "" {
			writeError(w, http.StatusNotFound, CodeNotFound, "the admin API is off: set admin.token")
			return
		}
		got, hasBearer := cutBearer(r.Header.Get("Authorization"))
		// Digests compared, so that the time taken says nothing of the
		// token, its length included (ConstantTimeCompare returns at once
		// on a length that differs).
		gotSum, wantSum := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(token))
		ok := hasBearer && subtle.ConstantTimeCompare(gotSum[:], wantSum[:]) == 1
		s.logger.Info("admin call", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "authorized", ok)
		if !ok {
			writeError(w, http.StatusUnauthorized, CodeUnauthorized, "a valid admin token is required")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) adminWorkers(w http.ResponseWriter, _ *http.Request) {
	cfg := s.cfg.Load()
	resp := s.WorkersView(cfg)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// WorkersView builds the GET /admin/dynamo/workers response.
func (s *Server) WorkersView(cfg *config.Config) admin.WorkersResponse {
	resp := admin.WorkersResponse{Workers: []admin.Worker{}, Subscriptions: []admin.Subscription{}, Namespaces: []string{}}
	if !cfg.Dynamo.Enabled || s.opts.Registry == nil {
		return resp
	}
	d := &cfg.Dynamo.Discovery
	resp.Enabled = true
	resp.Source = d.Source
	resp.Signals = admin.Signals{
		Load:     d.Source != config.SourceKubernetesPods,
		Capacity: d.Source != config.SourceKubernetesPods,
	}
	resp.Namespaces = d.Namespaces()
	if len(resp.Namespaces) > 0 {
		resp.Namespace = resp.Namespaces[0]
	}
	if s.opts.DiscoveryConnected != nil {
		resp.Connected = s.opts.DiscoveryConnected()
	}
	resp.Generation = s.opts.Registry.Generation()
	snap := s.opts.Registry.Snapshot()
	resp.Workers, _, _ = admin.Views(snap)
	for p := range snap.Publishers.All() {
		switch p.Topic {
		case "kv_metrics":
			resp.LoadPublishers++
		case "kv-events", "kv_events":
			resp.KVEventPublishers++
		}
	}
	if s.opts.Subscriptions != nil {
		for _, sub := range s.opts.Subscriptions() {
			resp.Subscriptions = append(resp.Subscriptions, admin.SubscriptionView(sub))
		}
	}
	if cfg.Dynamo.Load.Transport == config.TransportBroker && s.opts.BrokerCoverage != nil {
		resp.BrokerCoverage = s.opts.BrokerCoverage()
	}
	return resp
}

func (s *Server) adminConfig(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s.cfg.Load().Masked())
}

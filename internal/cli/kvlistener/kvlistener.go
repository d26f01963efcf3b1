// Package kvlistener implements `continuum kv-listener`: the in-cluster
// side of the event bus for KV event backends served as SSE. It announces
// its backends to the router's event bus listener and relays a backend's
// stream, resumed from the router's Last-Event-ID, when the router asks.
//
// Imports: cmdutil and engines (eventbus and its agent, telemetry); never
// another command.
package kvlistener

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/eventbus/agent"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/telemetry"
)

// Options are the parsed flags and dependencies of `kv-listener`.
type Options struct {
	IO     *iostreams.IOStreams
	Logger func() (*slog.Logger, error)

	Bus cmdutil.BusClientFlags
	// Backends maps each announced backend to its SSE URL (--backend).
	Backends map[string]string
	// Ready, when set, is told the metrics address once it is bound
	// (tests).
	Ready func(metricsAddr string)
}

// NewCmdKVListener returns `continuum kv-listener`. runF replaces the run
// step in tests.
func NewCmdKVListener(f *cmdutil.Factory, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Logger: f.Logger}
	var backends []string
	cmd := &cobra.Command{
		Use:   "kv-listener",
		Short: "Relay KV event backends' SSE streams to a router outside the cluster",
		Long: `Run inside the cluster for a router outside it: announce KV event backends
(--backend NAME=URL, repeatable; each NAME must be in the kv_listener entry's
backends) to the router's event bus listener, and relay a backend's
text/event-stream when the router opens it, resumed after the
Last-Event-ID the router holds.

The connection, credentials, reconnection, drain on SIGTERM and metrics
are those of continuum broker: --router, --id, --token-file or --cert and
--key, --ca-file, --drain-grace, --metrics-address.`,
		Example: `  continuum kv-listener --router https://router.example.com:7443 --id kv-listener-a \
    --token-file /var/run/secrets/continuum/token --backend vllm-1=http://vllm-1.dynamo.svc:8080/kv/events`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Bus.Check(); err != nil {
				return err
			}
			m, err := parseBackends(backends)
			if err != nil {
				return err
			}
			opts.Backends = m
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return Run(cmd.Context(), opts)
		},
	}
	opts.Bus.Register(cmd)
	cmd.Flags().StringArrayVar(&backends, "backend", nil, "NAME=URL: a backend to announce and its SSE endpoint (repeatable, at least one)")
	_ = cmd.MarkFlagRequired("backend")
	return cmd
}

// parseBackends reads the --backend values.
func parseBackends(values []string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range values {
		name, raw, ok := strings.Cut(v, "=")
		u, err := url.Parse(raw)
		switch {
		case !ok || name == "" || raw == "":
			return nil, cmdutil.FlagErrorf("--backend %q: want NAME=URL", v)
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			return nil, cmdutil.FlagErrorf("--backend %s: %q is not an http(s) URL", name, raw)
		case out[name] != "":
			return nil, cmdutil.FlagErrorf("--backend %s is given twice", name)
		}
		out[name] = raw
	}
	if len(out) == 0 {
		return nil, cmdutil.FlagErrorf("announce at least one --backend NAME=URL")
	}
	return out, nil
}

// Run keeps the session until ctx ends, then drains.
func Run(ctx context.Context, o *Options) error {
	logger, err := o.Logger()
	if err != nil {
		return err
	}
	creds, err := o.Bus.Credentials()
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := telemetry.NewBrokerMetrics(reg)
	names := slices.Sorted(maps.Keys(o.Backends))
	// The SSE streams are long-lived: no overall timeout, only reaching
	// the backend is bounded (by the client).
	ao := agent.Options{Router: o.Bus.Router, ID: o.Bus.ID, Role: eventbus.RoleKVListener, Sources: names,
		DrainGrace: o.Bus.DrainGrace, Metrics: metrics, Logger: logger, Opener: &agent.Backends{URLs: o.Backends, Client: &http.Client{}}}
	creds.Apply(&ao)
	client, err := agent.New(ao)
	if err != nil {
		return cmdutil.FlagErrorf("%v", err)
	}
	ms, err := agent.StartMetrics(o.Bus.MetricsAddress, reg, logger)
	if err != nil {
		return err
	}
	if o.Ready != nil && ms != nil {
		o.Ready(ms.Addr())
	}
	return agent.RunProcess(ctx, client, agent.Process{Metrics: ms, Logger: logger,
		Started: func(metricsAddr string) {
			logger.Info("kv-listener started", "router", o.Bus.Router, "id", o.Bus.ID, "backends", names, "metrics", metricsAddr)
		}})
}

// Package broker implements `continuum broker`: the in-cluster side of the
// event bus for a router that cannot reach the workers' publishers. It
// follows the fleet through a discovery source, dials out to the router's
// event bus listener, and relays the publishers the router asks for, as
// long as discovery advertises them.
//
// Imports: cmdutil and engines (discovery sources, eventbus and its agent,
// telemetry); never another command.
package broker

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/sources"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/eventbus/agent"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/telemetry"
)

// Options are the parsed flags and dependencies of `broker`.
type Options struct {
	IO         *iostreams.IOStreams
	Env        config.LookupEnv
	Logger     func() (*slog.Logger, error)
	ConfigFile string

	Bus       cmdutil.BusClientFlags
	Discovery cmdutil.DiscoveryFlags
	Timeout   time.Duration
	// Ready, when set, is told the metrics address once it is bound
	// (tests).
	Ready func(metricsAddr string)
}

// NewCmdBroker returns `continuum broker`. runF replaces the run step in
// tests.
func NewCmdBroker(f *cmdutil.Factory, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Env: f.Env, Logger: f.Logger}
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Relay a Dynamo fleet's event publishers to a router outside the cluster",
		Long: `Run inside the cluster, next to the workers, for a router outside it that
cannot reach their ZMQ publishers (dynamo.load.transport: broker).

The broker dials out to the router's event bus listener (--router, TLS 1.3
and HTTP/2; the router never dials in), authenticates as --id with a bearer
token (--token-file) or a client certificate whose DNS SAN is the id
(--cert, --key; these files and --ca-file are read again at each
connection, so a Secret rotated in place is used from the next one), and
declares the Dynamo namespaces it serves
(--dynamo-namespace, repeatable; each must be in the entry's allow-list).
For every stream the router asks for, it dials the publisher and relays its
raw bytes both ways, within the byte budget the router sets. A target that
the discovery source (the same flags as discover) does not advertise in a
declared namespace is refused with target_not_advertised: the broker dials
nothing else.

The session is kept with a full-jitter backoff. On SIGTERM the broker tells
the router it is draining (its streams move to another broker), and exits
once they are gone or --drain-grace has passed. Its metrics
(continuum_broker_*) are served on --metrics-address.`,
		Example: `  continuum broker --router https://router.example.com:7443 --id broker-a.dynamo \
    --token-file /var/run/secrets/continuum/token --ca-file /etc/continuum/ca.crt \
    --source kubernetes --dynamo-namespace dynamo
  continuum broker --router https://10.0.0.5:7443 --id broker-a.dynamo --token-file token \
    --etcd-endpoints http://etcd.dynamo.svc:2379 --dynamo-namespace dynamo`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.ConfigFile = f.ConfigPath()
			opts.Discovery.Capture(cmd.Flags())
			if err := opts.Bus.Check(); err != nil {
				return err
			}
			if len(opts.Discovery.DynamoNamespaces) == 0 {
				return cmdutil.FlagErrorf("declare the Dynamo namespaces this broker serves: --dynamo-namespace (repeatable)")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return Run(cmd.Context(), opts)
		},
	}
	opts.Bus.Register(cmd)
	// The namespaces declared, whatever the source (etcd and the file
	// store read them too unless --namespace says otherwise).
	opts.Discovery.EverySource = []string{"dynamo-namespace"}
	opts.Discovery.Register(cmd)
	cmd.Flags().DurationVar(&opts.Timeout, "timeout", discovery.SeedTimeout, "how long to wait for the discovery source's first complete read")
	return cmd
}

// Run follows the fleet and keeps the session until ctx ends, then
// drains.
func Run(ctx context.Context, o *Options) error {
	declared := slices.Clone(o.Discovery.DynamoNamespaces)
	if len(o.Discovery.Namespaces) == 0 {
		// etcd and the file store read the declared namespaces too.
		o.Discovery.Namespaces = declared
	}
	cfg, err := o.Discovery.Resolve(o.ConfigFile, o.Env)
	if err != nil {
		return err
	}
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

	// Bound and serving before the fleet's first read, which may take up
	// to --timeout: the liveness probe reads /healthz meanwhile.
	ms, err := agent.StartMetrics(o.Bus.MetricsAddress, reg, logger)
	if err != nil {
		return err
	}
	defer func() { _ = ms.Stop() }()
	if o.Ready != nil && ms != nil {
		o.Ready(ms.Addr())
	}
	fl, err := sources.Open(ctx, &cfg.Dynamo.Discovery, o.Discovery.KubeClient(), logger, o.Timeout)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer fl.Close()
	advertised := func(t eventbus.Target) bool {
		return slices.Contains(declared, t.Namespace) && fl.Registry.Snapshot().Advertises(t.Namespace, t.Host, t.Port, t.Topic)
	}
	ao := agent.Options{Router: o.Bus.Router, ID: o.Bus.ID, Role: eventbus.RoleBroker, Namespaces: declared,
		DrainGrace: o.Bus.DrainGrace, Metrics: metrics, Logger: logger, Opener: &agent.Publishers{Namespaces: declared, Advertised: advertised}}
	creds.Apply(&ao)
	client, err := agent.New(ao)
	if err != nil {
		return cmdutil.FlagErrorf("%v", err)
	}
	return agent.RunProcess(ctx, client, agent.Process{Metrics: ms, Logger: logger,
		Follow: func(ctx context.Context) { followAdvertised(ctx, fl.Registry, declared, metrics) },
		Started: func(metricsAddr string) {
			logger.Info("broker started", "router", o.Bus.Router, "id", o.Bus.ID, "namespaces", declared, "source", fl.Source, "metrics", metricsAddr)
		}})
}

// followAdvertised keeps continuum_broker_advertised_publishers at the
// number of event publishers discovery advertises in the declared
// namespaces.
func followAdvertised(ctx context.Context, reg *fleet.Registry, declared []string, m *telemetry.BrokerMetrics) {
	for {
		changed := reg.Changed()
		n := 0
		for p := range reg.Snapshot().Publishers.All() {
			if slices.Contains(declared, p.Namespace) && p.ZmqEndpoint() != "" {
				n++
			}
		}
		m.Advertised.Set(float64(n))
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

package routerd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/sources"
	"github.com/continuum-router/continuum/internal/dynamo/kvstack"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// StopGrace bounds how long stopping one part (a discovery watcher, a set
// of subscriptions) waits before abandoning it: a watcher replaced by a
// reload, and every part at shutdown. A shutdown that meets a replacement
// in progress may take two of them.
const StopGrace = 5 * time.Second

// part is one of the daemon's long-running parts, started under the
// daemon's parts context and stopped on its own.
type part struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs fn as a part. A part that fails (returns an error before it
// was asked to stop) ends the daemon with that error.
func (d *Daemon) start(name string, fn func(context.Context) error) *part {
	ctx, cancel := context.WithCancel(d.partsCtx)
	p := &part{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			d.fail(fmt.Errorf("%s: %w", name, err))
		}
	}()
	return p
}

// stop asks the part to end and waits for it, at most StopGrace; a part
// that outlives its grace is abandoned (its goroutine ends when it can).
func (p *part) stop(logger *slog.Logger) { stopParts(logger, p) }

// stopParts asks every part (nil ones skipped) to end at once and waits
// for them under one StopGrace, so that a transition stopping several
// parts takes no longer than one.
func stopParts(logger *slog.Logger, parts ...*part) {
	for _, p := range parts {
		if p != nil {
			p.cancel()
		}
	}
	t := time.NewTimer(StopGrace)
	defer t.Stop()
	expired := false
	for _, p := range parts {
		if p == nil {
			continue
		}
		if !expired {
			select {
			case <-p.done:
				continue
			case <-t.C:
				expired = true
			}
		}
		select {
		case <-p.done:
		default:
			logger.Warn("a part did not stop within its grace and is abandoned", "part", p.name, "grace", StopGrace)
		}
	}
}

// fail records the first part failure; Run ends with it.
func (d *Daemon) fail(err error) {
	select {
	case d.failed <- err:
	default:
	}
}

// dynamoParts are the parts that follow a Dynamo fleet: the discovery
// watcher and the load subscriptions, and the KV-aware parts when
// dynamo.kv.enabled. Each is nil when off.
type dynamoParts struct {
	watcher    *discovery.Watcher
	watcherRun *part
	supervisor *load.Supervisor
	loadRun    *part
	kv         *kvParts
}

// kvParts are KV-aware selection (the artifact loader, the index, the
// kv-events subscriptions feeding it and the picker over the load-based
// one) and the part running it.
type kvParts struct {
	st  *kvstack.Stack
	run *part
}

// newWatcher builds the discovery watcher of a configuration, without
// starting it.
func (d *Daemon) newWatcher(cfg *config.Config) (*discovery.Watcher, error) {
	src, backoff, err := sources.New(&cfg.Dynamo.Discovery, d.logger)
	if err != nil {
		return nil, err
	}
	if backoff.Initial < 0 || backoff.Max < backoff.Initial {
		return nil, fmt.Errorf("dynamo.discovery: reconnect backoff %v..%v is not valid", backoff.Initial, backoff.Max)
	}
	return &discovery.Watcher{Source: src, Registry: d.registry, Backoff: backoff, Metrics: d.dm, Logger: d.logger}, nil
}

// connector is how the subscriptions of a configuration reach publishers:
// directly, or through the event bus (whose subscriptions stay pending
// while no broker covers their namespace, and never fall back to dialling
// publishers directly, which the operator chose not to allow).
func (d *Daemon) connector(cfg *config.Config) (zmtp.Connector, error) {
	if cfg.Dynamo.Load.Transport == config.TransportBroker {
		return &eventbus.Connector{Bus: d.bus}, nil
	}
	cidrs, err := zmtp.ParseCIDRs(cfg.Dynamo.Load.DirectAllowCIDRs)
	if err != nil {
		return nil, fmt.Errorf("dynamo.load.direct_allow_cidrs: %w", err)
	}
	return &zmtp.Direct{Allow: cidrs}, nil
}

// artifactPolicy is the artifact policy of dynamo.kv.
func artifactPolicy(k *config.KV) (artifact.Policy, error) {
	p, err := artifact.PolicyFor(artifact.Settings{Pinned: k.PinnedArtifacts, AllowHTTP: k.AllowHTTPArtifacts,
		AllowHF: k.AllowHFArtifacts, CacheDir: k.ArtifactCacheDir}, os.LookupEnv)
	if err != nil {
		return p, fmt.Errorf("dynamo.kv.%w", err)
	}
	return p, nil
}

// newKV builds KV-aware selection over the daemon's load-based picker,
// without starting it. Its metric families are registered once, when it
// is first built, and kept if it is turned off and on again.
func (d *Daemon) newKV(cfg *config.Config, conn zmtp.Connector) (*kvParts, error) {
	if d.kvFamilies == nil {
		d.kvFamilies = kvstack.NewFamilies(d.promReg)
	}
	st, err := kvstack.New(kvstack.Options{Config: cfg, Registry: d.registry, Base: d.base, Families: d.kvFamilies,
		Connector: conn, Env: os.LookupEnv, Logger: d.logger, Prefetch: true})
	if err != nil {
		return nil, err
	}
	return &kvParts{st: st}, nil
}

// startKV starts KV-aware selection.
func (d *Daemon) startKV(k *kvParts) { k.run = d.start("KV-aware selection", k.st.Run) }

// part is the running KV-aware selection (nil when off).
func (k *kvParts) part() *part {
	if k == nil {
		return nil
	}
	return k.run
}

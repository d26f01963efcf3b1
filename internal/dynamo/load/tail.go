package load

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// TailConfig is one publisher to tail.
type TailConfig struct {
	Endpoint string
	// PublisherID is the expected publisher; 0 accepts any.
	PublisherID uint64
	Topic       string
	Connector   zmtp.Connector
	// Observe sees every message; it runs on the subscription's goroutine.
	Observe func(Event)
	// OnState, when set, is told about connection changes.
	OnState func(state string, err error)
}

// Tail subscribes to one publisher and reports every message until ctx
// ends, reconnecting with the supervisor's backoff. It stores nothing.
func Tail(ctx context.Context, c TailConfig) error {
	if c.Topic == "" {
		c.Topic = fleet.TopicLoad
	}
	if _, _, err := zmtp.SplitTCPEndpoint(c.Endpoint); err != nil {
		return err
	}
	lim := zmtp.LimitsKVEvents
	if c.Topic == fleet.TopicLoad {
		lim = zmtp.LimitsKVMetrics
	}
	state := func(s string, err error) {
		if c.OnState != nil {
			c.OnState(s, err)
		}
	}
	r := &reader{pid: c.PublisherID, anyPublisher: c.PublisherID == 0, topic: c.Topic, count: func(string) {}, observe: c.Observe}
	backoff := ReconnectInitial
	for ctx.Err() == nil {
		state(StateConnecting, nil)
		started := time.Now()
		err := tailSession(ctx, c, lim, r, state)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, zmtp.ErrProtocol) || errors.Is(err, zmtp.ErrNotAllowed) {
			if c.Observe != nil {
				c.Observe(Event{PublisherID: r.pid, Topic: c.Topic, Result: wire.ResultTransportRefused, Detail: err.Error()})
			}
		}
		if time.Since(started) >= ResetAfter {
			backoff = ReconnectInitial
		}
		state(StateBackoff, err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(backoff*2, ReconnectMax)
	}
	return nil
}

func tailSession(ctx context.Context, c TailConfig, lim zmtp.Limits, r *reader, state func(string, error)) error {
	cctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	conn, err := c.Connector.Connect(cctx, c.Endpoint)
	if err != nil {
		cancel()
		return fmt.Errorf("connect %s: %w", c.Endpoint, err)
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	zs, err := zmtp.Subscribe(cctx, conn, []byte(c.Topic), lim)
	cancel()
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", c.Endpoint, err)
	}
	state(StateConnected, nil)
	r.haveSeq = false
	for {
		frames, err := zs.Next()
		if errors.Is(err, zmtp.ErrOversized) {
			if c.Observe != nil {
				c.Observe(Event{PublisherID: r.pid, Topic: c.Topic, Result: wire.ResultOversized, Detail: "message over the size limit skipped"})
			}
			continue
		}
		if err != nil {
			return err
		}
		r.handle(frames, time.Now())
	}
}

// TailFleet tails every publisher of topic in the registry's fleet (at most
// MaxSubscriptions, in ascending publisher id), following generations until
// ctx ends. observe runs on many goroutines at once.
func TailFleet(ctx context.Context, reg *fleet.Registry, topic string, connector zmtp.Connector, observe func(Event)) {
	type running struct {
		pub    fleet.Publisher
		cancel context.CancelFunc
	}
	subs := map[uint64]*running{}
	done := make(chan struct{}, MaxSubscriptions)
	live := 0
	watch := reg.Subscribe()
	for {
		var want []*fleet.Publisher
		for _, p := range reg.Snapshot().Publishers {
			if p.Topic == topic {
				want = append(want, p)
			}
		}
		if len(want) > MaxSubscriptions {
			want = want[:MaxSubscriptions] // Publishers are sorted by namespace, then id
		}
		wanted := map[uint64]*fleet.Publisher{}
		for _, p := range want {
			wanted[p.PublisherID] = p
		}
		for id, r := range subs {
			if p, ok := wanted[id]; !ok || *p != r.pub {
				r.cancel()
				delete(subs, id)
			}
		}
		for _, p := range want {
			if _, ok := subs[p.PublisherID]; ok {
				continue
			}
			sctx, cancel := context.WithCancel(ctx)
			subs[p.PublisherID] = &running{pub: *p, cancel: cancel}
			live++
			go func(p fleet.Publisher) {
				defer func() { done <- struct{}{} }()
				_ = Tail(sctx, TailConfig{Endpoint: p.ZmqEndpoint(), PublisherID: p.PublisherID, Topic: topic, Connector: connector, Observe: observe})
			}(*p)
		}
		if _, err := watch.Next(ctx); err != nil {
			break
		}
	}
	for _, r := range subs {
		r.cancel()
	}
	for ; live > 0; live-- {
		<-done
	}
}

package load

import (
	"context"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
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
	// OnError, when set, is told why each attempt or session ended.
	OnError func(err error)
}

// Tail subscribes to one publisher and reports every message until ctx
// ends, reconnecting as the supervisor does. It stores nothing.
func Tail(ctx context.Context, c TailConfig) error {
	if c.Topic == "" {
		c.Topic = fleet.TopicLoad
	}
	if _, _, err := zmtp.SplitTCPEndpoint(c.Endpoint); err != nil {
		return err
	}
	var h Handler = tailReader(c.PublisherID, c.Topic, c.Observe)
	if c.OnError != nil {
		h = errorReporter{Handler: h, report: c.OnError}
	}
	l := &Loop{Endpoint: c.Endpoint, Topic: c.Topic, Limits: limitsOf(c.Topic), Connector: c.Connector, Handler: h}
	l.Run(ctx)
	return nil
}

// TailFleet tails every publisher of topic in the registry's fleet (at most
// MaxSubscriptions, lowest publisher ids first), following generations
// until ctx ends. observe runs on many goroutines at once; onError, when
// set, is told why each attempt or session of a publisher ended, on the
// same goroutines.
func TailFleet(ctx context.Context, reg *fleet.Registry, topic string, connector zmtp.Connector, observe func(Event), onError func(publisherID uint64, err error)) {
	pool := Pool{Family: topic, Limits: limitsOf(topic), Connector: connector,
		NewHandler: func(p fleet.Publisher) Handler {
			var h Handler = tailReader(p.PublisherID, topic, observe)
			if onError != nil {
				h = errorReporter{Handler: h, report: func(err error) { onError(p.PublisherID, err) }}
			}
			return h
		}}
	watch := reg.Subscribe()
	for {
		pool.Reconcile(ctx, publishers(reg.Snapshot(), topic))
		if _, err := watch.Next(ctx); err != nil {
			break
		}
	}
	pool.Stop()
}

// tailReader decodes without storing; pid 0 accepts any publisher.
func tailReader(pid uint64, topic string, observe func(Event)) *reader {
	return &reader{pid: pid, anyPublisher: pid == 0, topic: topic, count: func(string) {}, observe: observe}
}

// limitsOf is the size limits of a topic's messages.
func limitsOf(topic string) zmtp.Limits {
	if topic == fleet.TopicLoad {
		return zmtp.LimitsKVMetrics
	}
	return zmtp.LimitsKVEvents
}

// errorReporter also tells report why each attempt or session ended.
type errorReporter struct {
	Handler
	report func(error)
}

// OverLimit implements OverLimitHandler on behalf of the wrapped handler.
func (e errorReporter) OverLimit(frames [][]byte, over *zmtp.OverLimitError, now time.Time) {
	overLimit(e.Handler, frames, over, now)
}

func (e errorReporter) Ended(err error) {
	e.Handler.Ended(err)
	e.report(err)
}

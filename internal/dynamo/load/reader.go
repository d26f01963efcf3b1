package load

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// Event is one message as a subscription saw it, for observers (tail-load).
// Frames and Envelope.Payload are valid only during the callback.
type Event struct {
	PublisherID uint64
	Topic       string
	Frames      [][]byte
	Envelope    wire.Envelope
	Load        *wire.ActiveLoad
	// Result is telemetry.ResultAccepted or the reason the message was
	// dropped; Detail says more.
	Result string
	Detail string
}

// reader applies one subscription's messages: decode, identity, order.
type reader struct {
	pid uint64
	pub fleet.Publisher // the record it was made for (zero for a bare endpoint)
	// ns is the namespace of the publisher as discovered: the namespace
	// of the workers its samples are about.
	ns    fleet.NamespaceID
	topic string
	// anyPublisher accepts messages of any publisher id (tail-load on a
	// bare endpoint); store may be nil (decode only).
	anyPublisher bool
	store        *Store
	// count counts every result; observe, when set, sees every event.
	count   func(string)
	observe func(Event)
	logger  *slog.Logger
	lastSeq uint64
	haveSeq bool
	// next is the sequence that follows the last message read whole:
	// applied, or refused by the store for what it says (a worker not in
	// the snapshot, a full store). Nothing of the stream was missed up to
	// it, so only a sequence past it is a gap; lastSeq, the last applied,
	// is what duplicates are judged by.
	next     uint64
	haveNext bool

	// mu is held while a message is applied; retired (its publisher
	// left) applies nothing more.
	mu      sync.Mutex
	retired bool
}

// retire makes r apply nothing more, once what it is applying is done; a
// nil r is left alone.
func (r *reader) retire() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.retired = true
	r.mu.Unlock()
}

var _ OverLimitHandler = (*reader)(nil)

// Connected implements Handler. A session's sequence starts afresh, and
// what the publisher sent before may be stale: changes may have been
// missed while no session was up, and publishers send only on change, so
// a kept sample (a busy worker that has since gone idle) could stand
// until the next change. That holds for every session, the first one
// through a new transport included: a switch stops the old session, and
// nothing relays what the publisher sent in between. The requests sent to
// its workers since their last samples stay counted, as on a sequence gap:
// only a sample answers them (or their expiry), so a worker whose
// subscription keeps breaking is filled as much as the others rather than
// looking empty after every reconnect and drawing every request.
func (r *reader) Connected() {
	r.haveSeq, r.haveNext = false, false
	if r.store != nil {
		r.store.DropPublisher(r.pid)
	}
}

// Message implements Handler.
func (r *reader) Message(frames [][]byte, now time.Time) { r.handle(frames, now) }

// Oversized implements Handler.
func (r *reader) Oversized() {
	r.report(Event{PublisherID: r.pid, Topic: r.topic, Result: wire.ResultOversized, Detail: "message over the size limit skipped"})
}

// OverLimit implements OverLimitHandler. A message over the limits is
// judged by the rules of any other, on what was kept: a count of frames
// other than four is malformed, an id frame cut short is not 8 bytes
// (malformed), a topic frame cut short is not the topic (topic_mismatch).
// When only the payload frame was cut, its kept head says the rest: a
// payload declared over the limit is oversized, and one within it is whole
// in what was kept (the limits leave room for the largest payload beside
// the other frames), so that the bytes cut from the frame's end are
// trailing bytes, ignored as in any frame.
func (r *reader) OverLimit(frames [][]byte, over *zmtp.OverLimitError, now time.Time) {
	ev := Event{PublisherID: r.pid, Topic: r.topic, Frames: frames}
	r.mu.Lock()
	if r.retired {
		r.mu.Unlock()
		return
	}
	ev.Result, ev.Detail = r.overLimit(frames, over, now, &ev)
	r.mu.Unlock()
	r.report(ev)
}

func (r *reader) overLimit(frames [][]byte, over *zmtp.OverLimitError, now time.Time, ev *Event) (string, string) {
	// A message refused here was not read, as one refused by apply's
	// decoding: it may have been the publisher's change, so it drops the
	// publisher's samples at once, as apply does (missed).
	switch {
	case over.Frames != 4 || len(frames) != 4:
		r.missed()
		return wire.ResultMalformed, fmt.Sprintf("%d frames, want 4", over.Frames)
	case over.Cut(1) || over.Cut(2):
		r.missed()
		return wire.ResultMalformed, "publisher id or sequence frame is not 8 bytes"
	case over.Cut(0):
		r.missed()
		return wire.ResultTopicMismatch, fmt.Sprintf("frame topic of %d bytes", over.Sizes[0])
	}
	res, detail := r.apply(frames, now, ev)
	if res == wire.ResultMalformed && over.Cut(3) && wire.PayloadCut(frames[3]) && len(frames[1]) == 8 && len(frames[2]) == 8 {
		// The payload itself was cut: the limits are tighter than the
		// topic's payload bound.
		return wire.ResultOversized, "payload frame over the transport's limit"
	}
	return res, detail
}

// Ended implements Handler: a peer that broke the protocol or an address
// the policy refuses counts as transport_refused.
func (r *reader) Ended(err error) {
	if errors.Is(err, zmtp.ErrProtocol) || errors.Is(err, zmtp.ErrNotAllowed) {
		r.report(Event{PublisherID: r.pid, Topic: r.topic, Result: wire.ResultTransportRefused, Detail: err.Error()})
	}
	if r.logger != nil {
		r.logger.Debug("subscription session ended", "topic", r.topic, "publisher_id", r.pid, "err", err)
	}
}

func (r *reader) handle(frames [][]byte, now time.Time) {
	ev := Event{PublisherID: r.pid, Topic: r.topic, Frames: frames}
	r.mu.Lock()
	if r.retired {
		r.mu.Unlock()
		return
	}
	ev.Result, ev.Detail = r.apply(frames, now, &ev)
	r.mu.Unlock()
	r.report(ev)
}

func (r *reader) report(ev Event) {
	r.count(ev.Result)
	if r.observe != nil {
		r.observe(ev)
	}
}

// missed drops the publisher's samples at once when one of its messages
// could not be read (malformed, over the size limit, of an unknown
// version): it may have been the change that made them stale (a busy
// worker going idle), and a publisher sends only on change, so waiting
// for its next message to show the gap could keep the worker excluded
// for as long as it stays quiet.
func (r *reader) missed() {
	if r.store != nil && (r.topic == "" || r.topic == fleet.TopicLoad) && (!r.anyPublisher || r.haveSeq) {
		r.store.DropPublisher(r.pid)
	}
}

func (r *reader) apply(frames [][]byte, now time.Time, ev *Event) (string, string) {
	topic := r.topic
	if topic == "" {
		topic = fleet.TopicLoad
	}
	maxPayload := wire.MaxKVEventsPayloadBytes
	if topic == fleet.TopicLoad {
		maxPayload = wire.MaxLoadPayloadBytes
	}
	env, rej := wire.DecodeEventMessage(frames, topic, maxPayload)
	if rej != nil {
		r.missed()
		return rej.Result, rej.Detail
	}
	ev.Envelope = env
	if r.anyPublisher && !r.haveSeq {
		r.pid = env.PublisherID
	}
	if env.PublisherID != r.pid {
		if !r.anyPublisher {
			return wire.ResultIdentityMismatch, "publisher id differs from the discovery record's"
		}
		r.pid, r.haveSeq, r.haveNext = env.PublisherID, false, false // a restarted publisher on this endpoint
	}
	ev.PublisherID = r.pid
	if r.haveSeq && env.Sequence <= r.lastSeq {
		return wire.ResultDuplicate, "sequence not after the last one applied"
	}
	if r.haveNext && env.Sequence > r.next && r.store != nil {
		r.store.DropPublisher(r.pid) // a gap: a change may have been missed
	}
	// The cursors: lastSeq is the last sequence applied, next follows the
	// last message read whole. A message whose ActiveLoad is unreadable
	// moves neither, so that the next one shows the gap (it has dropped
	// the publisher's samples already, missed); one the store refuses for
	// what it says moves next only: it was read, and the publisher's
	// other samples missed nothing (a namespace-scoped publisher, as a
	// frontend's router, sends samples of workers the snapshot may not
	// hold between those of workers it does).
	if topic != fleet.TopicLoad {
		r.applied(env.Sequence)
		return telemetry.ResultAccepted, ""
	}
	l, err := wire.DecodeActiveLoad(env.Payload)
	if err != nil {
		r.missed()
		return wire.ResultMalformed, "ActiveLoad: " + err.Error()
	}
	ev.Load = &l
	if r.store == nil {
		r.applied(env.Sequence)
		return telemetry.ResultAccepted, ""
	}
	if res := r.store.Apply(Sample{Load: l, Namespace: r.ns, PublisherID: r.pid, Sequence: env.Sequence, PublishedAt: env.PublishedAt, ReceivedAt: now}); res != "" {
		r.read(env.Sequence)
		return res, "refused by the load store"
	}
	r.applied(env.Sequence)
	return telemetry.ResultAccepted, ""
}

// applied moves both cursors past seq, a message applied.
func (r *reader) applied(seq uint64) {
	r.lastSeq, r.haveSeq = seq, true
	r.read(seq)
}

// read moves next past seq, a message read whole.
func (r *reader) read(seq uint64) {
	if !r.haveNext || seq+1 > r.next {
		r.next, r.haveNext = seq+1, true
	}
}

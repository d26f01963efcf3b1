package load_test

import (
	"slices"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/telemetry"
)

// The kv_metrics subscription reads ActiveLoad samples off the network
// into the load store. FuzzReaderStore drives one publisher's reader with
// a fuzzed script of messages (well-formed ones from fuzzed fields, ones
// with fuzzed payloads, corrupted frames, new sessions) and holds the
// reader and store to a model of their documented rules after every step:
//   - a message a frame or envelope check rejects, of another publisher,
//     or not after the last sequence applied, changes nothing;
//   - a sequence gap (a sequence past the one after the last message read
//     whole, applied or refused by the store; or a new session) drops the
//     publisher's samples before anything else, and an ActiveLoad that
//     does not decode then leaves the store as it is and the cursors
//     where they were;
//   - the store keeps only samples of live workers of the publisher's own
//     namespace, at most MaxRanksPerWorker ranks a worker, and a kept
//     sample is exactly what was sent;
//   - every message is counted once, with a result of the closed set.

// fuzzPID is the reader's publisher; the script also sends as otherPID.
const fuzzPID, otherPID = 7, 8

// fuzzResults are the results a reader counts.
var fuzzResults = []string{telemetry.ResultAccepted, wire.ResultMalformed, wire.ResultUnknownVersion, wire.ResultTopicMismatch,
	wire.ResultOversized, wire.ResultIdentityMismatch, wire.ResultOverCapacity, wire.ResultDuplicate}

// script hands out a fuzz input's bytes, zero once they run out.
type script struct{ b []byte }

func (s *script) byte() byte {
	if len(s.b) == 0 {
		return 0
	}
	c := s.b[0]
	s.b = s.b[1:]
	return c
}

func (s *script) bytes(n int) []byte {
	n = min(n, len(s.b))
	p := s.b[:n]
	s.b = s.b[n:]
	return p
}

// modelSample is what the model expects the store to hold for a key.
type modelSample struct {
	load        wire.ActiveLoad
	seq, pubAt  uint64
	receivedAt  time.Time
	publisherID uint64
}

// model is the reader's cursor and the store's samples as the rules say.
type model struct {
	haveSeq  bool
	lastSeq  uint64
	haveNext bool
	next     uint64
	samples  map[load.Key]modelSample
	ranks    map[uint64]int
}

// live is the store's gate: workers 1 and 2 of namespace dynamo (the
// publisher's), and worker 3 of namespace canary only.
var live = map[fleet.WorkerID]load.LiveWorker{
	{Namespace: "dynamo", InstanceID: 1}: {DPSize: 2},
	{Namespace: "dynamo", InstanceID: 2}: {DPStartRank: 4, DPSize: 2},
	{Namespace: "canary", InstanceID: 3}: {},
}

func (m *model) dropAll() {
	clear(m.samples)
	clear(m.ranks)
}

// handle is the result the rules give frames, applied to the model.
func (m *model) handle(frames [][]byte, now time.Time) string {
	env, rej := wire.DecodeEventMessage(frames, "kv_metrics", wire.MaxLoadPayloadBytes)
	switch {
	case rej != nil:
		m.dropAll() // an unreadable message may have been a change
		return rej.Result
	case env.PublisherID != fuzzPID:
		return wire.ResultIdentityMismatch
	case m.haveSeq && env.Sequence <= m.lastSeq:
		return wire.ResultDuplicate
	case m.haveNext && env.Sequence > m.next:
		m.dropAll()
	}
	l, err := wire.DecodeActiveLoad(env.Payload)
	if err != nil {
		m.dropAll()
		return wire.ResultMalformed
	}
	k := load.Key{Namespace: load.NS("dynamo"), WorkerID: l.WorkerID, DPRank: l.DPRank}
	if !m.haveNext || env.Sequence+1 > m.next {
		m.next, m.haveNext = env.Sequence+1, true // read whole, applied or refused
	}
	if _, ok := live[fleet.WorkerID{Namespace: "dynamo", InstanceID: l.WorkerID}]; !ok {
		return wire.ResultIdentityMismatch
	}
	old, had := m.samples[k]
	switch {
	case had && old.publisherID == fuzzPID && env.Sequence <= old.seq:
		return wire.ResultDuplicate
	case !had && (len(m.samples) >= load.MaxStoreKeys || m.ranks[l.WorkerID] >= load.MaxRanksPerWorker):
		return wire.ResultOverCapacity
	}
	if !had {
		m.ranks[l.WorkerID]++
	}
	m.samples[k] = modelSample{load: l, seq: env.Sequence, pubAt: env.PublishedAt, receivedAt: now, publisherID: fuzzPID}
	m.lastSeq, m.haveSeq = env.Sequence, true
	return telemetry.ResultAccepted
}

func optEqual(a, b *uint64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// opt is a present field with value v when bit of mask is set.
func opt(mask byte, bit uint, v byte) *uint64 {
	if mask&(1<<bit) == 0 {
		return nil
	}
	x := uint64(v) * 1000
	return &x
}

// message builds a well-formed message from the script: publisher,
// sequence, worker, rank and the optional fields.
func message(s *script) (frames [][]byte) {
	pid := uint64(fuzzPID)
	if s.byte()%4 == 3 {
		pid = otherPID
	}
	seq := uint64(s.byte() % 32)
	workers := [...]uint64{1, 1, 2, 3, 4, 1, 2, 1}
	l := wire.ActiveLoad{WorkerID: workers[s.byte()%8], DPRank: uint32(s.byte() % 8)}
	mask := s.byte()
	l.ActiveDecodeBlocks, l.ActivePrefillTokens, l.KVUsedBlocks = opt(mask, 0, s.byte()), opt(mask, 1, s.byte()), opt(mask, 2, s.byte())
	return wire.EncodeEventMessage("kv_metrics", pid, seq, uint64(s.byte()), wire.EncodeActiveLoad(l))
}

func FuzzReaderStore(f *testing.F) {
	// In order: a sample, its successor on another rank, a duplicate, a
	// gap, a corrupted payload, a new session, a raw array payload.
	f.Add([]byte{0, 0, 1, 0, 0, 1, 10, 0, 0, 5,
		0, 0, 2, 0, 1, 1, 11, 0, 0, 5,
		1, 0, 2, 0, 1, 1, 99, 0, 0, 5,
		0, 0, 9, 2, 4, 7, 1, 2, 3, 6,
		3, 0, 10, 0, 0, 1, 1, 0, 0, 0, 3, 40, 0x55,
		5,
		2, 0, 11, 5, 0x94, 0x01, 0x00, 0xc0, 0x05})
	f.Add([]byte{2, 0, 0, 3, 0x91, 0x01, 0x00}) // an array cut short: worker only
	f.Add([]byte{2, 0, 0, 1, 0xc1})             // not msgpack
	f.Add([]byte{4, 0, 0, 1, 0, 0, 1, 10, 0, 0, 5, 2})
	f.Add([]byte{0, 3, 1, 0, 0, 1, 10, 0, 0, 5, 0, 0, 1, 3, 0, 1, 1, 0, 0, 0}) // another publisher, a worker of another namespace
	// One store serves every input (its change log is 1.5 MB, whose
	// allocation and scanning would dominate each run): every worker
	// leaves between inputs, which must leave it empty, then joins again.
	store := load.NewStore(time.Hour, nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &script{b: data}
		store.SetLiveAndRetain(nil)
		if n := store.Len(); n != 0 {
			t.Fatalf("%d samples outlived every worker's leaving", n)
		}
		store.SetLiveAndRetain(live)
		counted := map[string]int{}
		total := 0
		r := load.NewReader(fuzzPID, store, func(res string) { counted[res]++; total++ })
		m := &model{samples: map[load.Key]modelSample{}, ranks: map[uint64]int{}}
		touched := map[load.Key]bool{}
		now := time.Unix(1_800_000_000, 0)
		for step := 0; len(s.b) > 0 && step < 256; step++ {
			now = now.Add(time.Millisecond)
			var frames [][]byte
			switch op := s.byte() % 6; op {
			case 0, 1:
				frames = message(s)
			case 2: // a fuzzed payload in a well-formed envelope
				pid := uint64(fuzzPID)
				if s.byte()%4 == 3 {
					pid = otherPID
				}
				seq := uint64(s.byte() % 32)
				frames = wire.EncodeEventMessage("kv_metrics", pid, seq, 0, slices.Clone(s.bytes(int(s.byte()))))
			case 3: // a well-formed message with one byte changed
				frames = message(s)
				fr := frames[s.byte()%4]
				if len(fr) > 0 {
					fr[int(s.byte())%len(fr)] ^= s.byte() | 1
				}
			case 4: // frames missing, extra or emptied
				frames = message(s)
				switch s.byte() % 3 {
				case 0:
					frames = frames[:s.byte()%4]
				case 1:
					frames = append(frames, []byte("extra"))
				default:
					frames[s.byte()%4] = nil
				}
			case 5:
				r.Connected()
				m.haveSeq, m.haveNext = false, false
				m.dropAll()
				continue
			}
			// Keys the message may name, to be checked below.
			if env, rej := wire.DecodeEventMessage(frames, "kv_metrics", wire.MaxLoadPayloadBytes); rej == nil {
				if l, err := wire.DecodeActiveLoad(env.Payload); err == nil {
					touched[load.Key{Namespace: load.NS("dynamo"), WorkerID: l.WorkerID, DPRank: l.DPRank}] = true
				}
			}
			want := m.handle(frames, now)
			before := total
			r.Handle(frames, now)
			if total != before+1 {
				t.Fatalf("step %d: %d results counted for one message", step, total-before)
			}
			for res := range counted {
				if res != want || !slices.Contains(fuzzResults, res) {
					t.Fatalf("step %d: result %q, want %q (of the closed set)", step, res, want)
				}
			}
			counted = map[string]int{}
			check(t, step, store, m, touched)
		}
	})
}

// check compares the store with the model on every key a message named.
func check(t *testing.T, step int, store *load.Store, m *model, touched map[load.Key]bool) {
	t.Helper()
	if n := store.Len(); n != len(m.samples) || n > 2*load.MaxRanksPerWorker {
		t.Fatalf("step %d: the store holds %d samples, want %d", step, n, len(m.samples))
	}
	for k := range touched {
		got, ok := store.Latest(k)
		want, wantOK := m.samples[k]
		if ok != wantOK {
			t.Fatalf("step %d: key %+v held %v, want %v", step, k, ok, wantOK)
		}
		if !ok {
			continue
		}
		if got.PublisherID != fuzzPID || got.Namespace != load.NS("dynamo") {
			t.Fatalf("step %d: key %+v holds a sample of publisher %d in %v", step, k, got.PublisherID, got.Namespace)
		}
		if got.Load.WorkerID != k.WorkerID || got.Load.DPRank != k.DPRank || got.Sequence != want.seq || got.PublishedAt != want.pubAt ||
			!got.ReceivedAt.Equal(want.receivedAt) || !optEqual(got.Load.ActiveDecodeBlocks, want.load.ActiveDecodeBlocks) ||
			!optEqual(got.Load.ActivePrefillTokens, want.load.ActivePrefillTokens) || !optEqual(got.Load.KVUsedBlocks, want.load.KVUsedBlocks) {
			t.Fatalf("step %d: key %+v holds %+v, want %+v", step, k, got, want)
		}
	}
}

package wire

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Event-plane message layout: [topic][publisher_id u64 BE][sequence u64 BE]
// [version u8 = 1 | payload_len u32 BE | payload].
const (
	FrameVersion    = 1
	FrameHeaderSize = 5
	// MaxLoadPayloadBytes: a kv_metrics payload declared larger is refused
	// before it is parsed.
	MaxLoadPayloadBytes = 16 << 10
	// MaxKVEventsPayloadBytes bounds a kv-events payload.
	MaxKVEventsPayloadBytes = 1 << 20
)

// Results of decoding an event-plane message, as counted in
// continuum_dynamo_load_events_total{result}.
const (
	ResultMalformed        = "malformed"
	ResultUnknownVersion   = "unknown_version"
	ResultTopicMismatch    = "topic_mismatch"
	ResultOversized        = "oversized"
	ResultIdentityMismatch = "identity_mismatch"
	ResultOverCapacity     = "over_capacity"
	ResultDuplicate        = "duplicate"
	ResultTransportRefused = "transport_refused"
)

// Reject says why a message was dropped: a result and a detail for logs.
type Reject struct {
	Result string
	Detail string
}

func (r *Reject) Error() string { return r.Result + ": " + r.Detail }

func reject(result, format string, args ...any) *Reject {
	return &Reject{Result: result, Detail: fmt.Sprintf(format, args...)}
}

// Envelope is Dynamo's EventEnvelope.
type Envelope struct {
	Topic       string
	PublisherID uint64
	Sequence    uint64
	// PublishedAt is Unix milliseconds; zero when absent (a nil is
	// refused).
	PublishedAt uint64
	// Payload aliases the message's bytes (it is a copy only when it came
	// as an array of byte values); copy it to keep it.
	Payload []byte
}

// PayloadCut reports whether a version-1 payload frame declares more
// payload than it holds: a frame a bounded transport cut short, whose
// payload is over the limit (a frame cut only in bytes after its payload
// holds the payload whole).
func PayloadCut(frame []byte) bool {
	return len(frame) >= FrameHeaderSize && frame[0] == FrameVersion &&
		uint64(binary.BigEndian.Uint32(frame[1:FrameHeaderSize])) > uint64(len(frame)-FrameHeaderSize)
}

// DecodeEventMessage checks the four frames of one event-plane message
// against topic and maxPayload and decodes its envelope. The envelope's
// payload aliases frames[3]; bytes of frames[3] past the declared payload
// length are ignored.
func DecodeEventMessage(frames [][]byte, topic string, maxPayload int) (Envelope, *Reject) {
	if len(frames) != 4 {
		return Envelope{}, reject(ResultMalformed, "%d frames, want 4", len(frames))
	}
	if len(frames[1]) != 8 || len(frames[2]) != 8 {
		return Envelope{}, reject(ResultMalformed, "publisher id or sequence frame is not 8 bytes")
	}
	if string(frames[0]) != topic {
		return Envelope{}, reject(ResultTopicMismatch, "frame topic %q, want %q", truncate(frames[0]), topic)
	}
	pid := binary.BigEndian.Uint64(frames[1])
	seq := binary.BigEndian.Uint64(frames[2])
	f := frames[3]
	if len(f) < FrameHeaderSize {
		return Envelope{}, reject(ResultMalformed, "frame of %d bytes has no header", len(f))
	}
	if f[0] != FrameVersion {
		return Envelope{}, reject(ResultUnknownVersion, "frame version %d", f[0])
	}
	n := binary.BigEndian.Uint32(f[1:5])
	if uint64(n) > uint64(maxPayload) {
		return Envelope{}, reject(ResultOversized, "payload of %d bytes declared; at most %d", n, maxPayload)
	}
	// Bytes after the declared payload are ignored, as Dynamo's own frame
	// parser does: a frame that holds its whole payload is read the same
	// whatever follows it.
	if uint64(n) > uint64(len(f)-FrameHeaderSize) {
		return Envelope{}, reject(ResultMalformed, "payload length %d declared, %d present", n, len(f)-FrameHeaderSize)
	}
	env, err := decodeEnvelope(f[FrameHeaderSize : FrameHeaderSize+int(n)])
	if err != nil {
		return Envelope{}, reject(ResultMalformed, "envelope: %v", err)
	}
	if env.Topic != topic {
		return Envelope{}, reject(ResultTopicMismatch, "envelope topic %q, want %q", truncate([]byte(env.Topic)), topic)
	}
	if env.PublisherID != pid {
		return Envelope{}, reject(ResultIdentityMismatch, "envelope publisher %d, frame publisher %d", env.PublisherID, pid)
	}
	if env.Sequence != seq {
		return Envelope{}, reject(ResultMalformed, "envelope sequence %d, frame sequence %d", env.Sequence, seq)
	}
	return env, nil
}

func truncate(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}

// Envelope field orders of the positional (array) form. Dynamo has
// declared the envelope's fields in two orders: topic first, and topic
// fourth (after publisher_id, sequence and published_at). The first
// element tells them apart: a string is the topic, an integer the
// publisher id.
var (
	envelopeFieldsTopicFirst  = []string{"topic", "publisher_id", "sequence", "published_at", "payload"}
	envelopeFieldsTopicFourth = []string{"publisher_id", "sequence", "published_at", "topic", "payload"}
)

func decodeEnvelope(b []byte) (Envelope, error) {
	fields := envelopeFieldsTopicFourth
	head := &mpReader{b: b}
	if isMap, _, err := head.container(); err == nil && (isMap || head.peekString()) {
		// A map names its fields, so either order reads it.
		fields = envelopeFieldsTopicFirst
	}
	var env Envelope
	var seen [5]bool
	err := decodeStruct(b, fields, func(r *mpReader, i int) error {
		var err error
		switch fields[i] {
		case "topic":
			seen[0] = true
			var s []byte
			if s, err = r.raw(); err == nil {
				env.Topic = string(s)
			}
		case "publisher_id":
			seen[1] = true
			env.PublisherID, err = r.uint()
		case "sequence":
			seen[2] = true
			env.Sequence, err = r.uint()
		case "published_at":
			// A plain u64 in every revision of the envelope: its decoder
			// refuses a nil here, so a message carrying one is malformed.
			seen[3] = true
			env.PublishedAt, err = r.uint()
		case "payload":
			seen[4] = true
			env.Payload, err = r.bytesValue()
		}
		return err
	})
	if err != nil {
		return Envelope{}, err
	}
	for i, name := range []string{"topic", "publisher_id", "sequence"} {
		if !seen[i] {
			return Envelope{}, mpErr("no %s", name)
		}
	}
	if !seen[4] {
		return Envelope{}, mpErr("no payload")
	}
	return env, nil
}

// decodeStruct decodes a msgpack map (string keys, unknown ones skipped) or
// array (positional, extra elements skipped) into fields by index (at most
// 64). A map naming a field twice is refused, as Dynamo's decoder (serde)
// refuses it.
func decodeStruct(b []byte, fields []string, set func(r *mpReader, i int) error) error {
	r := &mpReader{b: b}
	isMap, n, err := r.container()
	if err != nil {
		return err
	}
	var seen uint64
	for i := range n {
		idx := i
		if isMap {
			key, err := r.raw()
			if err != nil {
				return err
			}
			idx = -1
			for j, f := range fields {
				if string(key) == f {
					idx = j
					break
				}
			}
		}
		if idx < 0 || idx >= len(fields) {
			if err := r.skip(0); err != nil {
				return err
			}
			continue
		}
		if seen&(1<<idx) != 0 {
			return mpErr("%s given twice", fields[idx])
		}
		seen |= 1 << idx
		if err := set(r, idx); err != nil {
			return fmt.Errorf("%s: %w", fields[idx], err)
		}
	}
	// Bytes after the value are ignored: Dynamo's own decoder reads one
	// value from the front of the slice and never looks past it.
	return nil
}

// ActiveLoad is one load sample of a worker's data-parallel rank. Nil
// fields were not sent (Dynamo 1.4.2 vLLM workers send only kv_used_blocks).
type ActiveLoad struct {
	WorkerID            uint64
	DPRank              uint32
	ActiveDecodeBlocks  *uint64
	ActivePrefillTokens *uint64
	KVUsedBlocks        *uint64
}

// ActiveLoad's positional (array) layouts, by length, as Dynamo has
// shipped them: each revision added a field after the others.
//   - 4: worker_id, dp_rank, active_decode_blocks, active_prefill_tokens
//   - 5: those, then kv_used_blocks
//   - 6: those four, then either scheduler_load_scope (nil or a string)
//     and kv_used_blocks, or (newer) kv_used_blocks and waiting_requests:
//     a number in place 4 can only be kv_used_blocks, nil or a string
//     only the scope (a nil there reads as the older layout, the bytes
//     telling the two apart no further)
//
// A longer array is a layout not known here: which of its places holds
// kv_used_blocks cannot be told, so it is malformed rather than guessed.
// One shorter than 4 is malformed too: of the four first places only
// dp_rank has a default, and a positional decoder cannot leave out a place
// before one it reads, so every revision's decoder requires all four and
// no Dynamo reader would take a shorter array as a sample.
const (
	minActiveLoadArray = len(activeLoadHead)
	maxActiveLoadArray = 6
)

var activeLoadHead = [...]string{"worker_id", "dp_rank", "active_decode_blocks", "active_prefill_tokens"}

// activeLoadFields are the fields DecodeActiveLoad reads.
var activeLoadFields = [...]string{"worker_id", "dp_rank", "active_decode_blocks", "active_prefill_tokens", "kv_used_blocks", "scheduler_load_scope"}

// activeLoadPlace names place i of an array of n elements.
func activeLoadPlace(n, i int) string {
	switch {
	case i < len(activeLoadHead):
		return activeLoadHead[i]
	case n == 5 && i == 4, n == 6 && i == 5:
		return "kv_used_blocks"
	case n == 6 && i == 4:
		return "scheduler_load_scope"
	}
	return ""
}

// DecodeActiveLoad decodes an ActiveLoad payload in map form (named
// fields, unknown ones skipped) or array form (the layouts above).
func DecodeActiveLoad(b []byte) (ActiveLoad, error) {
	var l ActiveLoad
	haveWorker := false
	opt := func(r *mpReader) (*uint64, error) {
		v, isNil, err := r.optUint()
		if err != nil || isNil {
			return nil, err
		}
		return &v, nil
	}
	r := &mpReader{b: b}
	isMap, n, err := r.container()
	if err != nil {
		return l, err
	}
	if !isMap && n > maxActiveLoadArray {
		return l, mpErr("array of %d elements; the known layouts have at most %d", n, maxActiveLoadArray)
	}
	if !isMap && n < minActiveLoadArray {
		return l, mpErr("array of %d elements; the known layouts have at least %d", n, minActiveLoadArray)
	}
	var seen uint8 // the known fields met, by their place in activeLoadFields
	newer := false // a 6-element array in the newer layout (see above)
	for i := range n {
		name := ""
		if isMap {
			key, err := r.raw()
			if err != nil {
				return l, err
			}
			name = string(key)
			// A known field named twice is refused, as Dynamo's decoder
			// (serde) refuses it.
			if j := slices.Index(activeLoadFields[:], name); j >= 0 {
				if seen&(1<<j) != 0 {
					return ActiveLoad{}, mpErr("%s given twice", name)
				}
				seen |= 1 << j
			}
		} else {
			name = activeLoadPlace(n, i)
			switch {
			case n == 6 && i == 4 && !r.peekString() && !r.peekNil():
				name, newer = "kv_used_blocks", true
			case n == 6 && i == 5 && newer:
				name = "waiting_requests"
			}
		}
		switch name {
		case "worker_id":
			l.WorkerID, err = r.uint()
			haveWorker = err == nil
		case "dp_rank":
			// A u32 with a default when absent, not an option: a nil is
			// refused, as Dynamo's decoder refuses it.
			var v uint64
			v, err = r.uint()
			if err == nil {
				if v > 1<<32-1 {
					err = mpErr("dp_rank %d", v)
				}
				l.DPRank = uint32(v)
			}
		case "active_decode_blocks":
			l.ActiveDecodeBlocks, err = opt(r)
		case "active_prefill_tokens":
			l.ActivePrefillTokens, err = opt(r)
		case "kv_used_blocks":
			l.KVUsedBlocks, err = opt(r)
		case "waiting_requests":
			_, err = opt(r) // not read, but held to its type as the rest
		case "scheduler_load_scope":
			if !isMap && !r.peekString() && !r.peekNil() {
				err = mpErr("not nil or a string")
				break
			}
			err = r.skip(0)
		default:
			err = r.skip(0)
		}
		if err != nil {
			return ActiveLoad{}, fmt.Errorf("%s: %w", nameOr(name, i), err)
		}
	}
	// Bytes after the value are ignored, as in the envelope.
	if !haveWorker {
		return ActiveLoad{}, mpErr("no worker_id")
	}
	return l, nil
}

func nameOr(name string, i int) string {
	if name != "" {
		return name
	}
	return fmt.Sprintf("element %d", i)
}

// EncodeActiveLoad writes l as a msgpack map with string keys in Dynamo's
// declaration order (rmp_serde::to_vec_named); nil fields are written nil.
func EncodeActiveLoad(l ActiveLoad) []byte {
	var w mpWriter
	w.mapHeader(5)
	w.str("worker_id")
	w.uint(l.WorkerID)
	w.str("dp_rank")
	w.uint(uint64(l.DPRank))
	for _, f := range []struct {
		name string
		v    *uint64
	}{{"active_decode_blocks", l.ActiveDecodeBlocks}, {"active_prefill_tokens", l.ActivePrefillTokens}, {"kv_used_blocks", l.KVUsedBlocks}} {
		w.str(f.name)
		if f.v == nil {
			w.b = append(w.b, 0xc0)
		} else {
			w.uint(*f.v)
		}
	}
	return w.b
}

// EncodeEventMessage builds the four frames of one event-plane message with
// a named (map) envelope, as Dynamo's publisher does.
func EncodeEventMessage(topic string, publisherID, sequence, publishedAtMs uint64, payload []byte) [][]byte {
	var w mpWriter
	w.mapHeader(5)
	w.str("topic")
	w.str(topic)
	w.str("publisher_id")
	w.uint(publisherID)
	w.str("sequence")
	w.uint(sequence)
	w.str("published_at")
	w.uint(publishedAtMs)
	w.str("payload")
	w.bin(payload)
	frame := make([]byte, FrameHeaderSize, FrameHeaderSize+len(w.b))
	frame[0] = FrameVersion
	binary.BigEndian.PutUint32(frame[1:], uint32(len(w.b)))
	frame = append(frame, w.b...)
	return [][]byte{[]byte(topic), binary.BigEndian.AppendUint64(nil, publisherID), binary.BigEndian.AppendUint64(nil, sequence), frame}
}

// mpWriter writes the compact msgpack forms rmp_serde uses.
type mpWriter struct{ b []byte }

func (w *mpWriter) mapHeader(n int) {
	if n < 16 {
		w.b = append(w.b, 0x80|byte(n))
		return
	}
	w.b = append(w.b, 0xde)
	w.b = binary.BigEndian.AppendUint16(w.b, uint16(n))
}

func (w *mpWriter) str(s string) {
	switch n := len(s); {
	case n < 32:
		w.b = append(w.b, 0xa0|byte(n))
	case n < 1<<8:
		w.b = append(w.b, 0xd9, byte(n))
	case n < 1<<16:
		w.b = append(w.b, 0xda)
		w.b = binary.BigEndian.AppendUint16(w.b, uint16(n))
	default:
		w.b = append(w.b, 0xdb)
		w.b = binary.BigEndian.AppendUint32(w.b, uint32(n))
	}
	w.b = append(w.b, s...)
}

func (w *mpWriter) bin(p []byte) {
	switch n := len(p); {
	case n < 1<<8:
		w.b = append(w.b, 0xc4, byte(n))
	case n < 1<<16:
		w.b = append(w.b, 0xc5)
		w.b = binary.BigEndian.AppendUint16(w.b, uint16(n))
	default:
		w.b = append(w.b, 0xc6)
		w.b = binary.BigEndian.AppendUint32(w.b, uint32(n))
	}
	w.b = append(w.b, p...)
}

func (w *mpWriter) uint(v uint64) {
	switch {
	case v < 128:
		w.b = append(w.b, byte(v))
	case v < 1<<8:
		w.b = append(w.b, 0xcc, byte(v))
	case v < 1<<16:
		w.b = append(w.b, 0xcd)
		w.b = binary.BigEndian.AppendUint16(w.b, uint16(v))
	case v < 1<<32:
		w.b = append(w.b, 0xce)
		w.b = binary.BigEndian.AppendUint32(w.b, uint32(v))
	default:
		w.b = append(w.b, 0xcf)
		w.b = binary.BigEndian.AppendUint64(w.b, v)
	}
}

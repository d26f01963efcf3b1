package wire_test

import (
	"encoding/binary"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// mpStr is a msgpack fixstr.
func mpStr(s string) []byte { return append([]byte{0xa0 | byte(len(s))}, s...) }

// kvMetricsMessage is the four frames of a kv_metrics message from
// publisher 7 at sequence 0 whose version-1 frame holds env.
func kvMetricsMessage(env []byte) [][]byte {
	frame := binary.BigEndian.AppendUint32([]byte{1}, uint32(len(env)))
	return [][]byte{[]byte("kv_metrics"), binary.BigEndian.AppendUint64(nil, 7), binary.BigEndian.AppendUint64(nil, 0), append(frame, env...)}
}

// TestActiveLoadAndEnvelopeRefuseWhatSerdeRefuses: Dynamo decodes the
// envelope and the ActiveLoad with serde (rmp_serde::from_slice), whose
// derived struct decoder refuses a field given twice ("duplicate field")
// and a nil where a plain integer is declared (dp_rank is u32 with a
// default for when it is absent, not Option). The design counts a payload
// whose msgpack decoding fails as malformed, and the kv-events
// decoder already refuses a field given twice "as serde does"; the
// kv_metrics path takes the last copy instead, or reads nil as rank 0.
func TestActiveLoadAndEnvelopeRefuseWhatSerdeRefuses(t *testing.T) {
	// {"worker_id": 1, "worker_id": 2}
	dup := append([]byte{0x82}, mpStr("worker_id")...)
	dup = append(dup, 1)
	dup = append(append(dup, mpStr("worker_id")...), 2)
	if l, err := wire.DecodeActiveLoad(dup); err == nil {
		t.Errorf("ActiveLoad with worker_id twice decoded as worker %d; serde refuses a duplicate field", l.WorkerID)
	}
	// {"worker_id": 1, "dp_rank": nil}
	nilRank := append([]byte{0x82}, mpStr("worker_id")...)
	nilRank = append(append(append(nilRank, 1), mpStr("dp_rank")...), 0xc0)
	if l, err := wire.DecodeActiveLoad(nilRank); err == nil {
		t.Errorf("ActiveLoad with dp_rank nil decoded as rank %d; dp_rank is a u32, not an Option", l.DPRank)
	}

	// An envelope naming its topic twice, another topic first.
	payload := wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 1})
	env := []byte{0x86}
	env = append(append(env, mpStr("topic")...), mpStr("kv-events")...)
	env = append(append(env, mpStr("publisher_id")...), 7)
	env = append(append(env, mpStr("sequence")...), 0)
	env = append(append(env, mpStr("published_at")...), 1)
	env = append(append(env, mpStr("payload")...), append([]byte{0xc4, byte(len(payload))}, payload...)...)
	env = append(append(env, mpStr("topic")...), mpStr("kv_metrics")...)
	msg := kvMetricsMessage(env)
	if _, rej := wire.DecodeEventMessage(msg, "kv_metrics", wire.MaxLoadPayloadBytes); rej == nil || rej.Result != wire.ResultMalformed {
		t.Errorf("envelope with topic twice: %v, want malformed (serde refuses a duplicate field)", rej)
	}
}

// TestEnvelopePublishedAtNilRefused: published_at is a plain u64 in every
// revision of Dynamo's envelope, so its decoder (serde) refuses a nil
// there, as it refuses a nil dp_rank; the message is malformed rather than
// read as published at time zero.
func TestEnvelopePublishedAtNilRefused(t *testing.T) {
	payload := wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 1})
	env := []byte{0x85}
	env = append(append(env, mpStr("topic")...), mpStr("kv_metrics")...)
	env = append(append(env, mpStr("publisher_id")...), 7)
	env = append(append(env, mpStr("sequence")...), 0)
	env = append(append(env, mpStr("published_at")...), 0xc0)
	env = append(append(env, mpStr("payload")...), append([]byte{0xc4, byte(len(payload))}, payload...)...)
	msg := kvMetricsMessage(env)
	if _, rej := wire.DecodeEventMessage(msg, "kv_metrics", wire.MaxLoadPayloadBytes); rej == nil || rej.Result != wire.ResultMalformed {
		t.Errorf("envelope with published_at nil: %v, want malformed (a u64, not an Option)", rej)
	}
}

// TestEnvelopePayloadAsByteArray: Dynamo's envelope decoder reads the
// payload as a byte vector, which serde also fills from a sequence of
// integers 0-255: what a serializer writes for a byte vector it was not
// told to write as bytes. Such a payload is the same payload as the bin
// holding those bytes; an element that is no byte (over 255, negative,
// nil, a float) makes the message malformed, as it fails that decoder.
func TestEnvelopePayloadAsByteArray(t *testing.T) {
	payload := wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 1, DPRank: 2})
	message := func(payloadValue []byte) [][]byte {
		env := []byte{0x85}
		env = append(append(env, mpStr("topic")...), mpStr("kv_metrics")...)
		env = append(append(env, mpStr("publisher_id")...), 7)
		env = append(append(env, mpStr("sequence")...), 0)
		env = append(append(env, mpStr("published_at")...), 0xcd, 0x01, 0x00)
		env = append(append(env, mpStr("payload")...), payloadValue...)
		return kvMetricsMessage(env)
	}
	// Each byte in the most compact integer form (as rmp-serde writes it),
	// then in wider forms a decoder takes as well.
	compact := binary.BigEndian.AppendUint16([]byte{0xdc}, uint16(len(payload)))
	wide := binary.BigEndian.AppendUint32([]byte{0xdd}, uint32(len(payload)))
	for i, b := range payload {
		if b <= 0x7f {
			compact = append(compact, b)
		} else {
			compact = append(compact, 0xcc, b)
		}
		switch i % 3 {
		case 0:
			wide = append(wide, 0xcd, 0, b)
		case 1:
			wide = append(wide, 0xd1, 0, b)
		default:
			wide = append(wide, 0xcf, 0, 0, 0, 0, 0, 0, 0, b)
		}
	}
	for name, value := range map[string][]byte{"compact": compact, "wide": wide} {
		env, rej := wire.DecodeEventMessage(message(value), "kv_metrics", wire.MaxLoadPayloadBytes)
		if rej != nil {
			t.Errorf("%s byte array payload refused: %v", name, rej)
			continue
		}
		if string(env.Payload) != string(payload) {
			t.Errorf("%s byte array payload read as % x, want % x", name, env.Payload, payload)
		}
		if l, err := wire.DecodeActiveLoad(env.Payload); err != nil || l.WorkerID != 1 || l.DPRank != 2 {
			t.Errorf("%s byte array payload decodes to %+v, %v", name, l, err)
		}
	}
	if env, rej := wire.DecodeEventMessage(message([]byte{0x90}), "kv_metrics", wire.MaxLoadPayloadBytes); rej != nil || len(env.Payload) != 0 {
		t.Errorf("empty array payload: %q, %v; want an empty payload", env.Payload, rej)
	}
	for name, value := range map[string][]byte{
		"256":        {0x92, 0x01, 0xcd, 0x01, 0x00},
		"negative":   {0x92, 0x01, 0xff},
		"nil":        {0x92, 0xc0, 0x01},
		"float":      {0x91, 0xca, 0x3f, 0x80, 0x00, 0x00},
		"string":     {0x91, 0xa1, 'a'},
		"truncated":  {0x93, 0x01, 0x02},
		"over count": {0xdd, 0x7f, 0xff, 0xff, 0xff, 0x01},
	} {
		if _, rej := wire.DecodeEventMessage(message(value), "kv_metrics", wire.MaxLoadPayloadBytes); rej == nil || rej.Result != wire.ResultMalformed {
			t.Errorf("payload array with %s element: %v, want malformed", name, rej)
		}
	}
}

package eventbus_test

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/eventbus"
)

// TestMessages: every message type round-trips, and what a peer must not
// send is refused.
func TestMessages(t *testing.T) {
	t.Parallel()
	id := strings.Repeat("0f", 16)
	last := uint64(41)
	valid := []*eventbus.Message{
		hello(eventbus.RoleBroker, "broker-a.dynamo", []string{"dynamo"}, nil),
		hello(eventbus.RoleKVListener, "kv-a", nil, []string{"vllm-1"}),
		// Whatever configuration accepts for a namespace or a backend
		// name goes on the wire; whether an entry allows it is the
		// entry's to say.
		hello(eventbus.RoleBroker, "broker-b", []string{"dynamo_ns", "_x", "ns+1@é"}, nil),
		hello(eventbus.RoleKVListener, "kv-b", nil, []string{"vllm_1", "a.b:c"}),
		{Type: eventbus.TypeSubscribe, StreamID: id, Target: &eventbus.Target{Namespace: "dynamo_ns", Host: "10.0.0.1", Port: 5557, Topic: "kv_metrics"}},
		{Type: eventbus.TypeWelcome, SessionID: "sess-" + id, Version: 1, Limits: &eventbus.Limits{MaxStreams: 1024, StreamBufferBytes: 16384, HeartbeatIntervalMs: 10000, IdleTimeoutMs: 30000}},
		{Type: eventbus.TypeSubscribe, StreamID: id, Target: &eventbus.Target{Namespace: "dynamo", Host: "10.0.0.1", Port: 5557, Topic: "kv_metrics"}},
		{Type: eventbus.TypeSubscribe, StreamID: id, Target: &eventbus.Target{Namespace: "dynamo", Host: "fd00::1", Port: 5557, Topic: "kv-events"}},
		{Type: eventbus.TypeSubscribe, StreamID: id, Announced: &eventbus.AnnouncedTarget{Backend: "vllm-1", LastEventID: &last}},
		{Type: eventbus.TypeUnsubscribe, StreamID: id},
		{Type: eventbus.TypeStreamClosed, StreamID: id, Code: eventbus.CodeTargetNotAdvertised},
		{Type: eventbus.TypeDraining},
		{Type: eventbus.TypeHeartbeat, Seq: 7},
		{Type: eventbus.TypeHeartbeatAck, Seq: 7},
		{Type: eventbus.TypeError, Code: eventbus.CodeSessionSuperseded, Detail: "replaced"},
	}
	for _, m := range valid {
		line := eventbus.Encode(m)
		if line[len(line)-1] != '\n' || bytes.Count(line, []byte("\n")) != 1 {
			t.Errorf("%s: not one line: %q", m.Type, line)
		}
		got, err := eventbus.Decode(line[:len(line)-1])
		if err != nil {
			t.Errorf("%s: %v", m.Type, err)
			continue
		}
		if !reflect.DeepEqual(&got, m) {
			t.Errorf("%s: round trip %+v, want %+v", m.Type, got, *m)
		}
	}
	invalid := []string{
		``, `{}`, `[]`, `{"type":"nope"}`,
		`{"type":"hello","role":"admin","client_id":"a","versions":[1]}`,
		`{"type":"hello","role":"broker","client_id":"a b","versions":[1]}`,
		`{"type":"hello","role":"broker","client_id":"a"}`,
		`{"type":"hello","role":"broker","client_id":"a","versions":[1],"dynamo_namespaces":["x\n"]}`,
		`{"type":"hello","role":"broker","client_id":"a","versions":[1],"dynamo_namespaces":["x\u00a0y"]}`,
		`{"type":"hello","role":"broker","client_id":"a","versions":[1],"dynamo_namespaces":[""]}`,
		`{"type":"hello","role":"kv_listener","client_id":"a","versions":[1],"sources":["` + strings.Repeat("v", 254) + `"]}`,
		`{"type":"welcome","session_id":"sess-1","version":1,"limits":{"max_streams":1,"stream_buffer_bytes":1,"heartbeat_interval_ms":1,"idle_timeout_ms":1}}`,
		// Limits a client would size its queues or timers by, past their bounds.
		`{"type":"welcome","session_id":"sess-0123456789abcdef0123456789abcdef","version":1,"limits":{"max_streams":65537,"stream_buffer_bytes":16384,"heartbeat_interval_ms":1,"idle_timeout_ms":1}}`,
		`{"type":"welcome","session_id":"sess-0123456789abcdef0123456789abcdef","version":1,"limits":{"max_streams":1,"stream_buffer_bytes":1048577,"heartbeat_interval_ms":1,"idle_timeout_ms":1}}`,
		`{"type":"welcome","session_id":"sess-0123456789abcdef0123456789abcdef","version":1,"limits":{"max_streams":1,"stream_buffer_bytes":16384,"heartbeat_interval_ms":9223372036854775807,"idle_timeout_ms":1}}`,
		`{"type":"welcome","session_id":"sess-0123456789abcdef0123456789abcdef","version":1,"limits":{"max_streams":1,"stream_buffer_bytes":16384,"heartbeat_interval_ms":1,"idle_timeout_ms":86400001}}`,
		`{"type":"subscribe","stream_id":"` + id + `"}`,
		`{"type":"subscribe","stream_id":"` + strings.ToUpper(id) + `","target":{"namespace":"d","host":"h","port":1,"topic":"t"}}`,
		`{"type":"subscribe","stream_id":"` + id + `","target":{"namespace":"d","host":"h/x","port":1,"topic":"t"}}`,
		`{"type":"subscribe","stream_id":"` + id + `","target":{"namespace":"d","host":"h","port":70000,"topic":"t"}}`,
		`{"type":"subscribe","stream_id":"` + id + `","target":{"namespace":"d","host":"h","port":1,"topic":"t"},"announced":{"backend":"b"}}`,
		`{"type":"unsubscribe","stream_id":"x"}`,
		`{"type":"error","code":"` + strings.Repeat("c", 300) + `"}`,
	}
	for _, line := range invalid {
		if _, err := eventbus.Decode([]byte(line)); !errors.Is(err, eventbus.ErrInvalid) {
			t.Errorf("%s: err = %v, want invalid", line, err)
		}
	}
	// Unknown fields are ignored (a newer peer's additions).
	if _, err := eventbus.Decode([]byte(`{"type":"heartbeat","seq":1,"new_field":true}`)); err != nil {
		t.Errorf("unknown field: %v", err)
	}
}

// TestLineReader: lines are split on newlines (CRLF too), empty ones
// skipped, and a line over the bound is an error rather than memory.
func TestLineReader(t *testing.T) {
	t.Parallel()
	lr := eventbus.NewLineReader(strings.NewReader("a\r\n\nbb\nccc"), 4)
	var got []string
	for {
		line, err := lr.Next()
		if err != nil {
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("end: %v", err)
			}
			break
		}
		got = append(got, string(line))
	}
	if strings.Join(got, ",") != "a,bb" {
		t.Errorf("lines %q", got)
	}
	lr = eventbus.NewLineReader(strings.NewReader(strings.Repeat("x", 10000)+"\n"), 100)
	if _, err := lr.Next(); !errors.Is(err, eventbus.ErrLineTooLong) {
		t.Errorf("long line: %v", err)
	}
	lr = eventbus.NewLineReader(strings.NewReader(""), 100)
	if _, err := lr.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("empty stream: %v", err)
	}
}

// FuzzDecode: any line decodes or is refused without panicking; what
// decodes is valid and survives a round trip.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"type":"hello","role":"broker","client_id":"b","dynamo_namespaces":["dynamo"],"versions":[1]}`))
	f.Add([]byte(`{"type":"subscribe","stream_id":"0123456789abcdef0123456789abcdef","target":{"namespace":"d","host":"10.0.0.1","port":5557,"topic":"kv_metrics"}}`))
	f.Add([]byte(`{"type":"subscribe","stream_id":"0123456789abcdef0123456789abcdef","announced":{"backend":"v","last_event_id":3}}`))
	f.Add([]byte(`{"type":"stream_closed","stream_id":"0123456789abcdef0123456789abcdef","code":"target_not_advertised"}`))
	f.Add([]byte(`{"type":"welcome","session_id":"sess-0123456789abcdef0123456789abcdef","version":1,"limits":{"max_streams":1,"stream_buffer_bytes":16384,"heartbeat_interval_ms":1,"idle_timeout_ms":1}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := eventbus.Decode(line)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("decoded but invalid: %v", err)
		}
		again, err := eventbus.Decode(bytes.TrimSuffix(eventbus.Encode(&m), []byte("\n")))
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("round trip: %+v, %v", again, err)
		}
	})
}

// FuzzLineReader: whatever a peer sends, no line is longer than the bound.
func FuzzLineReader(f *testing.F) {
	f.Add([]byte("a\nbb\r\n\n"), 2)
	f.Add([]byte(strings.Repeat("z", 5000)), 100)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		max = 1 + (max&0xffff)%8192
		lr := eventbus.NewLineReader(bytes.NewReader(data), max)
		for range len(data) + 1 {
			line, err := lr.Next()
			if err != nil {
				return
			}
			if len(line) == 0 || len(line) > max || bytes.IndexByte(line, '\n') >= 0 {
				t.Fatalf("line %q with max %d", line, max)
			}
		}
	})
}

package eventbus

import (
	"errors"
	"testing"
	"time"
)

// TestOpenStreamBusy: a session whose control queue is full (its channel
// is not being read) makes OpenStream fail as busy, and registers
// nothing.
func TestOpenStreamBusy(t *testing.T) {
	t.Parallel()
	b, err := New(Settings{MaxSessions: 1, MaxStreamsPerSession: 4, MaxSessionBufferBytes: 4 * MinSessionBudgetPerStream,
		HeartbeatInterval: time.Millisecond, IdleTimeout: 2 * time.Millisecond}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &session{bus: b, id: "sess-" + newID(), role: RoleBroker, entID: "b", namespaces: []string{"dynamo"},
		limits: Limits{MaxStreams: 4}, out: make(chan []byte), done: make(chan struct{}), streams: map[string]*stream{}}
	b.sessions[s.id], b.byEntry["b"] = s, s
	if _, err := b.OpenStream(t.Context(), Target{Namespace: "dynamo", Host: "10.0.0.1", Port: 1, Topic: "kv_metrics"}); !errors.Is(err, ErrBusy) {
		t.Errorf("err = %v, want busy", err)
	}
	if len(s.streams) != 0 {
		t.Errorf("%d streams registered", len(s.streams))
	}
}

package kube

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

type recSink struct{ keys map[string][]byte }

func (s *recSink) Put(k string, v []byte) { s.keys[k] = v }
func (s *recSink) Delete(k string)        { delete(s.keys, k) }
func (s *recSink) ResyncBegin()           {}
func (s *recSink) ResyncEnd()             {}
func (s *recSink) Flush()                 {}

// Past MaxDWMs resources, new ones are refused under one malformed
// refusal that counts them; held ones still update; the refusal goes when
// the refused resources do.
func TestJoinResourceCap(t *testing.T) {
	t.Parallel()
	j := newJoin([]string{"dn"}, slog.New(slog.DiscardHandler))
	dwm := func(i int) []byte {
		name := fmt.Sprintf("w-%d", i)
		return []byte(fmt.Sprintf(`{"metadata":{"name":%q,"uid":"u%d"},"spec":{"data":{"endpoints":{"x":{"type":"Endpoint","namespace":"dn","component":"c","endpoint":"generate","instance_id":%d}}}}}`,
			name, i, HashPodName(name)))
	}
	sink := &recSink{keys: map[string][]byte{}}
	for i := range MaxDWMs + 2 {
		j.applyDWM(dwm(i), false)
	}
	j.applyDWM(dwm(MaxDWMs+1), false) // an update of a refused one counts once
	j.publishAll(sink)
	r, err := wire.ParseRefusal(sink.keys[overCapacityKey])
	if err != nil || r.Kind != "malformed" || len(j.dwms) != MaxDWMs {
		t.Fatalf("refusal %+v (%v), %d held", r, err, len(j.dwms))
	}
	if want := fmt.Sprintf("%d DynamoWorkerMetadata resources refused", 2); r.Reason[:len(want)] != want {
		t.Fatalf("reason %q", r.Reason)
	}
	j.applyDWM(dwm(MaxDWMs), true)
	j.applyDWM(dwm(MaxDWMs+1), true)
	j.flush(sink)
	if _, ok := sink.keys[overCapacityKey]; ok {
		t.Fatal("the over-capacity refusal stayed after the refused resources went")
	}
}

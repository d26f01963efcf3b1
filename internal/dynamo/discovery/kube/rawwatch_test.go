package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
	"testing/iotest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// refEvent is one event of a watch stream as encoding/json reads it with
// no bound, and the bytes it took from the stream (white space before it
// included).
type refEvent struct {
	typ  watch.EventType
	raw  json.RawMessage
	size int64
}

// referenceEvents decodes a watch stream without the watch's bound; clean
// reports whether it ended at the end of the input.
func referenceEvents(data []byte) (evs []refEvent, clean bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		var ev struct {
			Type   watch.EventType `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		before := dec.InputOffset()
		if err := dec.Decode(&ev); err != nil {
			return evs, errors.Is(err, io.EOF)
		}
		evs = append(evs, refEvent{ev.Type, ev.Object, dec.InputOffset() - before})
	}
}

// FuzzRawWatch: a watch stream from the API server, whatever it holds and
// however its reads are cut, ends, gives the events encoding/json reads
// from it in order (a prefix of them when an event is past the bound or
// the stream breaks), all of them when every event is within the bound,
// none larger than the bound allows (the event's own bytes plus what the
// decoder had read ahead, itself bounded), and an error event as a Status.
func FuzzRawWatch(f *testing.F) {
	f.Add([]byte(`{"type":"ADDED","object":{"metadata":{"name":"w"}}}`+"\n"+`{"type":"MODIFIED","object":{"spec":{}}}`), false)
	f.Add([]byte(`{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}`), true)
	f.Add([]byte(`{"type":"ERROR","object":"not a status"} {"type":"DELETED","object":null}`), false)
	f.Add([]byte(`{"type":"ADDED","object":{"data":"`+string(bytes.Repeat([]byte("x"), 200))+`"}}`), true)
	f.Add([]byte(`{"type":"ADDED","object":{}}{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"12"}}} [`), false)
	const limit = 96
	f.Fuzz(func(t *testing.T, data []byte, oneByte bool) {
		want, clean := referenceEvents(data)
		var body io.Reader = bytes.NewReader(data)
		if oneByte {
			body = iotest.OneByteReader(body)
		}
		ctx, cancel := context.WithCancel(context.Background())
		w := &rawWatch{ch: make(chan watch.Event), ctx: ctx, cancel: cancel, done: make(chan struct{}), limit: limit}
		go w.read(io.NopCloser(body))
		var got []watch.Event
		for ev := range w.ch {
			got = append(got, ev)
		}
		<-w.done
		cancel()

		if len(got) > len(want) {
			t.Fatalf("%d events, encoding/json reads %d", len(got), len(want))
		}
		within := clean
		for _, ev := range want {
			within = within && ev.size <= limit
		}
		if within && len(got) != len(want) {
			t.Fatalf("%d events of %d, all within the bound", len(got), len(want))
		}
		for i, ev := range got {
			ref := want[i]
			if ev.Type != ref.typ {
				t.Fatalf("event %d: type %q, want %q", i, ev.Type, ref.typ)
			}
			if ref.size > 2*limit {
				t.Fatalf("event %d: %d bytes passed a bound of %d", i, ref.size, limit)
			}
			if ev.Type == watch.Error {
				st, ok := ev.Object.(*metav1.Status)
				if !ok {
					t.Fatalf("event %d: error event with a %T", i, ev.Object)
				}
				var wantSt metav1.Status
				if json.Unmarshal(ref.raw, &wantSt) != nil {
					wantSt = metav1.Status{Status: metav1.StatusFailure, Message: "undecodable error event"}
				}
				if !reflect.DeepEqual(*st, wantSt) {
					t.Fatalf("event %d: status %+v, want %+v", i, *st, wantSt)
				}
				continue
			}
			o, ok := ev.Object.(*rawObject)
			if !ok {
				t.Fatalf("event %d: a %T", i, ev.Object)
			}
			if !bytes.Equal(o.raw, ref.raw) {
				t.Fatalf("event %d: object %q, want %q", i, o.raw, ref.raw)
			}
		}
	})
}

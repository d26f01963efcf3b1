package kv_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/telemetry"
)

// lockedBuf is a concurrency-safe log sink.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestUnsupportedBlockSizeOncePerModel: a block size
// outside 16..=65536 is logged once per model and counted as
// continuum_dynamo_kv_artifacts_total{result="unsupported"}; the workers
// of a supported size are still chosen by the formula.
func TestUnsupportedBlockSizeOncePerModel(t *testing.T) {
	t.Parallel()
	snap, pins := sizedFleet(t, "m", []sizedWorker{
		{"dynamo", "Aggregated", 30, 16},
		{"dynamo", "Aggregated", 31, 16},
		{"dynamo", "Aggregated", 32, 8}, // below 16
		{"dynamo", "Aggregated", 33, 4}, // below 16 too: the model is logged once
	})
	store, ix, prompts := liveKV(t, snap, pins)
	m := telemetry.NewKVMetrics(nil)
	notes := telemetry.NewArtifactMetrics(nil)
	var logs lockedBuf
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	p := kv.NewPicker(pick.NewLoadBased(store), ix, prompts, kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}}, m, notes, logger)
	body := longChat(200)
	pr := prepared(t, prompts, snap, "/v1/chat/completions", body, 16)
	hold(t, ix, 1, idOf(snap, 31), pr.Hashes[16], 8)
	for range 5 {
		pin, tk, err := p.Reserve(snap, pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(body)}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		p.Release(tk)
		if pin.Decode.Worker.ID.InstanceID != 31 || pin.DecodeReason != pick.ReasonKVAware {
			t.Fatalf("decode %d (%s): want the holder 31", pin.Decode.Worker.ID.InstanceID, pin.DecodeReason)
		}
	}
	if n := promtest.ToFloat64(notes.Artifacts.WithLabelValues(telemetry.ArtifactUnsupported)); n < 1 {
		t.Errorf("unsupported block size counted %v times, want at least once", n)
	}
	if n := strings.Count(logs.String(), "block size"); n != 1 {
		t.Errorf("unsupported block size logged %d times over 5 requests of one model, want once:\n%s", n, logs.String())
	}
	// Above 65536 is unsupported too: another model, logged once more.
	big, bigPins := sizedFleet(t, "big", []sizedWorker{{"dynamo", "Aggregated", 40, 16}, {"dynamo", "Aggregated", 41, 131072}})
	_, _, bigPrompts := liveKV(t, big, bigPins)
	pb := kv.NewPicker(pick.NewLoadBased(store), ix, bigPrompts, kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}}, m, notes, logger)
	for range 2 {
		_, tk, err := pb.Reserve(big, pick.Request{Model: "big", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(body)}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		pb.Release(tk)
	}
	if n := strings.Count(logs.String(), "block_size=131072"); n != 1 {
		t.Errorf("a block size above 65536 logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestPrefillBesideAggregatedIsAggregatedFleet: a
// prefill worker with aggregated workers and no decode worker is no
// candidate; the fleet is scored as an aggregated one (the formula among
// the aggregated workers).
func TestPrefillBesideAggregatedIsAggregatedFleet(t *testing.T) {
	t.Parallel()
	snap, pins := kvFleet(t, []uint64{10}, nil, []uint64{30, 31})
	store, ix, prompts := liveKV(t, snap, pins)
	m := telemetry.NewKVMetrics(nil)
	p := kv.NewPicker(pick.NewLoadBased(store), ix, prompts, kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}}, m, nil, nil)
	body := longChat(200)
	pr := prepared(t, prompts, snap, "/v1/chat/completions", body, 16)
	hold(t, ix, 1, idOf(snap, 10), pr.Hashes[16], len(pr.Hashes[16])) // the prefill worker holds it all
	hold(t, ix, 2, idOf(snap, 31), pr.Hashes[16], 6)
	for range 4 {
		pin, tk, err := p.Reserve(snap, pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(body)}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		p.Release(tk)
		if pin.Prefill != nil || pin.Decode.Worker.ID.InstanceID != 31 || pin.DecodeReason != pick.ReasonKVAware {
			t.Fatalf("prefill %v, decode %d (%s): want aggregated holder 31 alone", pin.Prefill, pin.Decode.Worker.ID.InstanceID, pin.DecodeReason)
		}
	}
	if n := promtest.ToFloat64(m.Selections.WithLabelValues(kv.ResultOverlap)); n != 4 {
		t.Errorf("overlap selections %v, want 4", n)
	}
}

// TestConditionalScoresDecode: with
// conditional_disaggregation the decode workers are scored with
// max(0, decode_cost_blocks - overlap_credit_blocks): the decode worker
// holding part of the prompt is chosen (kv_aware) even when it lacks too
// much of it to prefill itself; without the option decode keeps the load
// rule.
func TestConditionalScoresDecode(t *testing.T) {
	t.Parallel()
	snap, ix, p, _, pr, req := conditionalPicker(t)
	terms := kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}
	if len(pr.Hashes[16]) < 40 {
		t.Fatalf("prompt of %d blocks", len(pr.Hashes[16]))
	}
	hold(t, ix, 1, idOf(snap, 21), pr.Hashes[16], 10)
	for range 4 {
		pin, tk, err := p.Reserve(snap, req, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		p.Release(tk)
		if pin.Bypass || pin.Prefill == nil || pin.Decode.Worker.ID.InstanceID != 21 || pin.DecodeReason != pick.ReasonKVAware {
			t.Fatalf("conditional: bypass %v prefill %v decode %d (%s), want decode holder 21 (kv_aware) with a prefill worker",
				pin.Bypass, pin.Prefill, pin.Decode.Worker.ID.InstanceID, pin.DecodeReason)
		}
	}
	// Off: decode by the load rule (never kv_aware).
	p.SetSettings(kv.Settings{Terms: terms})
	for range 4 {
		pin, tk, err := p.Reserve(snap, req, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		p.Release(tk)
		if pin.DecodeReason == pick.ReasonKVAware {
			t.Fatalf("decode chosen by the formula without conditional disaggregation")
		}
	}
}

var _ = load.NS

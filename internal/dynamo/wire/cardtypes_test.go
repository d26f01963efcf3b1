package wire_test

import (
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// TestParseWorkerType: every spelling Dynamo revisions write (the bitflags
// derive's capitalised names and unions, the later lowercase names), any
// case and spacing, empty as absent, and unknown tokens named.
func TestParseWorkerType(t *testing.T) {
	tests := []struct {
		in      string
		want    wire.WorkerType
		absent  bool
		problem string // a substring of the problem; "" when there is none
	}{
		// bitflags derive
		{"Prefill", wire.WorkerPrefill, false, ""},
		{"Decode", wire.WorkerDecode, false, ""},
		{"Encode", wire.WorkerEncode, false, ""},
		{"Prefill | Decode", wire.WorkerAggregated, false, ""},
		{"Decode | Prefill", wire.WorkerAggregated, false, ""},
		// hand-written serde
		{"prefill", wire.WorkerPrefill, false, ""},
		{"decode", wire.WorkerDecode, false, ""},
		{"encode", wire.WorkerEncode, false, ""},
		{"aggregated", wire.WorkerAggregated, false, ""},
		{"prefill|decode", wire.WorkerAggregated, false, ""},
		// enum-like names
		{"Aggregated", wire.WorkerAggregated, false, ""},
		// any case, spaces around the value and its parts
		{"  PREFILL ", wire.WorkerPrefill, false, ""},
		{" prefill |DECODE ", wire.WorkerAggregated, false, ""},
		{"AgGrEgAtEd", wire.WorkerAggregated, false, ""},
		{"aggregated | prefill", wire.WorkerAggregated, false, ""},
		{"decode|decode", wire.WorkerDecode, false, ""},
		// empty means absent
		{"", wire.WorkerUnknown, true, ""},
		{"   ", wire.WorkerUnknown, true, ""},
		// unknown tokens claim nothing and are named
		{"Encoder9000", wire.WorkerUnknown, false, `unrecognised token "encoder9000"`},
		{"Prefill | Bogus", wire.WorkerUnknown, false, `unrecognised token "bogus"`},
		{"Prefill_Decode", wire.WorkerUnknown, false, `unrecognised token "prefill_decode"`},
		{"prefill|", wire.WorkerUnknown, false, "empty part"},
		{"|", wire.WorkerUnknown, false, "empty part"},
		{"pre fill", wire.WorkerUnknown, false, `unrecognised token "pre fill"`},
		{strings.Repeat("x", 200), wire.WorkerUnknown, false, strings.Repeat("x", 64) + "…"},
		// encode with another stage is no worker type: never prefill,
		// decode or aggregated
		{"Prefill | Encode", wire.WorkerUnknown, false, "encode joined"},
		{"decode|encode", wire.WorkerUnknown, false, "encode joined"},
		{"aggregated|encode", wire.WorkerUnknown, false, "encode joined"},
	}
	for _, tt := range tests {
		wt, absent, problem := wire.ParseWorkerType(tt.in)
		if wt != tt.want || absent != tt.absent || (tt.problem == "") != (problem == "") || !strings.Contains(problem, tt.problem) {
			t.Errorf("ParseWorkerType(%q) = %q, absent %v, problem %q; want %q, %v, %q", tt.in, wt, absent, problem, tt.want, tt.absent, tt.problem)
		}
	}
}

// TestParseModelType: flag strings as the bitflags derive writes them, a
// bare integer bitmask, hexadecimal parts, unknown names ignored.
func TestParseModelType(t *testing.T) {
	tests := []struct {
		raw  string
		want wire.ModelType
		ok   bool
	}{
		{`"Chat | Completions"`, wire.ModelChat | wire.ModelCompletions, true},
		{`"Prefill"`, wire.ModelPrefill, true},
		{`"prefill"`, wire.ModelPrefill, true},
		{`" Chat|Completions | Prefill "`, wire.ModelChat | wire.ModelCompletions | wire.ModelPrefill, true},
		{`"Embedding | TensorBased | Images | Audios | Videos"`, wire.ModelEmbedding | wire.ModelTensorBased | wire.ModelImages | wire.ModelAudios | wire.ModelVideos, true},
		{`"Chat | Backend | Completion"`, wire.ModelChat, true},
		{`"Chat | 0x10"`, wire.ModelChat | wire.ModelPrefill, true},
		{`""`, 0, true},
		{`16`, wire.ModelPrefill, true},
		{`3`, wire.ModelChat | wire.ModelCompletions, true},
		{`0`, 0, true},
		{`-1`, 0, false},
		{`1.5`, 0, false},
		{`true`, 0, false},
		{`["Chat"]`, 0, false},
		{`{"bits":16}`, 0, false},
	}
	for _, tt := range tests {
		got, ok := wire.ParseModelType([]byte(tt.raw))
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseModelType(%s) = %#x, %v; want %#x, %v", tt.raw, got, ok, tt.want, tt.ok)
		}
	}
	if !(wire.ModelChat | wire.ModelPrefill).Has(wire.ModelPrefill) || wire.ModelChat.Has(wire.ModelPrefill) {
		t.Error("Has")
	}
}

// TestParseModelRoleFields: a card's worker_type and model_type as each
// dialect writes them, and the ways a worker_type can be missing.
func TestParseModelRoleFields(t *testing.T) {
	tests := []struct {
		card      string
		wt        wire.WorkerType
		absent    bool
		problem   bool
		modelType wire.ModelType
		errs      string
	}{
		{`{"worker_type":"Prefill | Decode","model_type":"Chat | Completions"}`, wire.WorkerAggregated, false, false, wire.ModelChat | wire.ModelCompletions, ""},
		{`{"worker_type":"aggregated"}`, wire.WorkerAggregated, false, false, 0, ""},
		{`{"model_type":"Prefill","model_input":"Tokens"}`, wire.WorkerUnknown, true, false, wire.ModelPrefill, ""},
		{`{"worker_type":null,"model_type":16}`, wire.WorkerUnknown, true, false, wire.ModelPrefill, ""},
		{`{"worker_type":"","model_type":"Chat"}`, wire.WorkerUnknown, true, false, wire.ModelChat, ""},
		{`{"worker_type":"Prefill | Bogus"}`, wire.WorkerUnknown, false, true, 0, ""},
		{`{"worker_type":3}`, wire.WorkerUnknown, false, true, 0, "worker_type"},
		{`{"worker_type":"decode","model_type":{"bits":1}}`, wire.WorkerDecode, false, false, 0, "model_type"},
		{`"not an object"`, wire.WorkerUnknown, false, false, 0, "card_json is not an object"},
	}
	for _, tt := range tests {
		m, err := wire.ParseModel([]byte(`{"type":"Model","instance_id":1,"card_json":` + tt.card + `}`))
		if err != nil {
			t.Fatalf("%s: %v", tt.card, err)
		}
		c := m.Card
		if c.WorkerType != tt.wt || c.WorkerTypeAbsent != tt.absent || (c.WorkerTypeProblem != "") != tt.problem || c.ModelType != tt.modelType ||
			strings.Join(m.CardErrors, ",") != tt.errs {
			t.Errorf("%s: type %q absent %v problem %q model_type %#x errors %v", tt.card, c.WorkerType, c.WorkerTypeAbsent, c.WorkerTypeProblem, c.ModelType, m.CardErrors)
		}
	}
}

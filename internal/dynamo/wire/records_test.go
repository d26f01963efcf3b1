package wire_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// TestCoreCardFieldsKeepTypedCard: an oversized card shrunk to
// CoreCardFields (as a source that cannot hold it whole does) parses to the
// same typed card as the whole card, which is what the reducer keeps when
// it drops the opaque JSON of a card put whole: the artifact slots KV-aware
// selection reads and the release versions included.
func TestCoreCardFieldsKeepTypedCard(t *testing.T) {
	t.Parallel()
	card := `{"display_name":"m","name":"org/m","worker_type":"Prefill","model_type":"Chat|Completions","kv_cache_block_size":16,"migration_limit":2,
	  "runtime_config":{"total_kv_blocks":9,"max_num_batched_tokens":8192,"data_parallel_size":2,"disaggregated_endpoint":{"bootstrap_host":"h","bootstrap_port":1}},
	  "lora":null,"dynamo_version":"1.5.0","runtime_version":"0.9","version":"3","release":"r7",
	  "tokenizer":{"HfTokenizerJson":{"path":"/m/tokenizer.json","checksum":"blake3:00"}},
	  "prompt_formatter":{"HfTokenizerConfigJson":{"path":"/m/tokenizer_config.json"}},
	  "chat_template_file":{"HfChatTemplate":{"path":"/m/template.jinja"}},
	  "padding":"` + strings.Repeat("x", 1<<20) + `"}`
	whole, err := wire.ParseModel([]byte(`{"type":"Model","instance_id":1,"card_json":` + card + `}`))
	if err != nil {
		t.Fatal(err)
	}
	c := whole.Card
	if c.Tokenizer == nil || c.PromptFormatter == nil || c.ChatTemplateFile == nil || len(c.Versions) != 4 || c.KVCacheBlockSize == nil || len(whole.CardErrors) != 0 {
		t.Fatalf("the whole card lacks fields this test needs: %+v, errors %v", c, whole.CardErrors)
	}

	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(card), &fields); err != nil {
		t.Fatal(err)
	}
	core := map[string]json.RawMessage{}
	for _, f := range wire.CoreCardFields {
		if v, ok := fields[f]; ok {
			core[f] = v
		}
	}
	if _, ok := core["padding"]; ok {
		t.Fatal("a field the router does not read is core")
	}
	shrunk, err := json.Marshal(core)
	if err != nil {
		t.Fatal(err)
	}
	small, err := wire.ParseModel([]byte(`{"type":"Model","instance_id":1,"card_json":` + string(shrunk) + `}`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(small.Card, whole.Card) {
		t.Errorf("shrunk card parses to\n%+v\nthe whole card to\n%+v", small.Card, whole.Card)
	}
}

// TestRecordFieldsMatchExactly: a key that differs from a field's name only
// in case (or by a Unicode fold, as the Kelvin sign to "k") is an unknown
// field and ignored, as Dynamo's own decoder reads records, wherever it
// stands; encoding/json alone would take it for the field.
func TestRecordFieldsMatchExactly(t *testing.T) {
	t.Parallel()
	e, err := wire.ParseEndpoint([]byte(`{"type":"Endpoint","component":"backend","endpoint":"generate","Instance_ID":3,"instance_id":1,"INSTANCE_ID":2,"Component":"x"}`))
	if err != nil || e.InstanceID != (wire.ID{Value: 1, Set: true}) || e.Component != "backend" {
		t.Errorf("endpoint %+v, %v", e, err)
	}
	m, err := wire.ParseModel([]byte(`{"type":"Model","Instance_Id":9,"instance_id":1,"card_json":{"display_name":"m","worker_type":"Decode","Worker_Type":"Prefill","DISPLAY_NAME":"other","\u212Av_cache_block_size":8,"kv_cache_block_size":16}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.InstanceID.Value != 1 || m.Card.Model() != "m" || m.Card.WorkerType != wire.WorkerDecode || m.Card.KVCacheBlockSize == nil || *m.Card.KVCacheBlockSize != 16 {
		t.Errorf("model %+v, card %+v", m, m.Card)
	}
	// Only the case-folded key present: the field is absent.
	e, err = wire.ParseEndpoint([]byte(`{"type":"Endpoint","Instance_id":5}`))
	if err != nil || e.InstanceID.Set {
		t.Errorf("endpoint %+v, %v: a case-folded key was read as instance_id", e, err)
	}
}

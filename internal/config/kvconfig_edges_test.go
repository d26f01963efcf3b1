package config_test

import (
	"testing"

	"github.com/continuum-router/continuum/internal/config"
)

// TestKVConfig: dynamo.kv defaults (pinned
// artifacts empty), conditional_disaggregation.enabled warns in config
// validate (not an error), decode_busy_threshold is a fraction, a pin is
// "blake3:<64 hex>".
func TestKVConfig(t *testing.T) {
	t.Parallel()
	d := parse(t, "").Config.Dynamo.KV
	if len(d.PinnedArtifacts) != 0 || d.Enabled {
		t.Errorf("defaults: pinned %v enabled %v", d.PinnedArtifacts, d.Enabled)
	}
	doc := parse(t, "dynamo:\n  kv:\n    enabled: true\n    conditional_disaggregation:\n      enabled: true\n")
	if !hasFinding(doc, config.SeverityWarning, "dynamo.kv.conditional_disaggregation.enabled", "disaggregated_prefill_decode_unavailable") {
		t.Errorf("no warning for conditional_disaggregation.enabled: %v", doc.Findings)
	}
	if doc.Findings.Errors() != 0 {
		t.Errorf("errors: %v", doc.Findings)
	}
	for _, tc := range []struct {
		v  string
		ok bool
	}{{"0", true}, {"1", true}, {"0.5", true}, {"1.01", false}, {"-0.1", false}} {
		doc := parse(t, "dynamo:\n  kv:\n    conditional_disaggregation:\n      decode_busy_threshold: "+tc.v+"\n")
		if got := !hasFinding(doc, config.SeverityError, "dynamo.kv.conditional_disaggregation.decode_busy_threshold", ""); got != tc.ok {
			t.Errorf("decode_busy_threshold %s: ok=%v, want %v", tc.v, got, tc.ok)
		}
	}
	hex := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		v  string
		ok bool
	}{{"blake3:" + hex, true}, {"blake3:" + hex[:63], false}, {"sha256:" + hex, false}, {hex, false}} {
		doc := parse(t, "dynamo:\n  kv:\n    pinned_artifacts: [\""+tc.v+"\"]\n")
		if got := !hasFinding(doc, config.SeverityError, "dynamo.kv.pinned_artifacts[0]", ""); got != tc.ok {
			t.Errorf("pin %q: ok=%v, want %v", tc.v, got, tc.ok)
		}
	}
}

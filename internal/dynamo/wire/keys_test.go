package wire_test

import (
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

func TestFileStoreName(t *testing.T) {
	if got := wire.FileStoreName("dynamo/backend-x/generate/7a_1"); got != "dynamo%2Fbackend%2Dx%2Fgenerate%2F7a%5F1" {
		t.Errorf("FileStoreName: %s", got)
	}
}

// TestWatchedChannelKey: scoped keys belong to their scope prefix's
// namespace, four-segment (Dynamo 1.2) keys to their first segment, even
// for a namespace literally named "namespace".
func TestWatchedChannelKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		key        string
		namespaces []string
		want       bool
	}{
		{"v1/event_channels/namespace/dynamo/topic/kv_metrics/1f", []string{"dynamo"}, true},
		{"v1/event_channels/namespace/dynamo/component/decode/endpoint/generate/topic/kv-events/1f", []string{"dynamo"}, true},
		{"v1/event_channels/namespace/other/topic/kv_metrics/1f", []string{"dynamo"}, false},
		{"v1/event_channels/namespace/ns%2Eone/topic/kv_metrics/1f", []string{"ns.one"}, true},
		{"v1/event_channels/dynamo/decode/kv_metrics/2a", []string{"dynamo"}, true},
		{"v1/event_channels/dynamo//kv_metrics/2a", []string{"dynamo"}, true},
		{"v1/event_channels/other/decode/kv_metrics/2a", []string{"dynamo"}, false},
		// A 1.2 key of namespace "namespace" under dynamo's scoped prefix.
		{"v1/event_channels/namespace/dynamo/kv_metrics/8", []string{"dynamo"}, false},
		{"v1/event_channels/namespace/dynamo/kv_metrics/8", []string{"namespace"}, true},
		// Malformed under a watched scoped prefix: ours, to be reported.
		{"v1/event_channels/namespace/dynamo/topic/kv_metrics/zz", []string{"dynamo"}, true},
		{"v1/event_channels/namespace/dynamo/topic/kv_metrics/zz", []string{"other"}, false},
	} {
		if got := wire.WatchedChannelKey(c.key, c.namespaces); got != c.want {
			t.Errorf("WatchedChannelKey(%q, %q) = %v", c.key, c.namespaces, got)
		}
	}
}

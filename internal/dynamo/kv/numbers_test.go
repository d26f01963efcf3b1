package kv_test

import (
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/tokenize"
)

// TestContractNumbers pins the KV-aware selection's and the event bus's
// limits to their values: the other tests refer to the constants, so a
// changed constant would pass them all.
func TestContractNumbers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"kv-events frame payload (1 MiB)", wire.MaxKVEventsPayloadBytes, 1 << 20},
		{"subscriptions per family", load.MaxSubscriptions, 1024},
		{"MAX_INDEX_BLOCKS", kv.MaxIndexBlocks, 1_048_576},
		{"MAX_BLOCKS_PER_RANK", kv.MaxBlocksPerRank, 262_144},
		{"MAX_INDEX_OWNERSHIPS", kv.MaxIndexOwnerships, 8_388_608},
		{"MAX_OWNERS_PER_NODE", kv.MaxOwnersPerNode, 4096},
		{"cursors per subscription", kv.MaxCursorsPerSubscription, 4096},
		{"artifact bytes (64 MiB)", artifact.MaxArtifactBytes, 64 << 20},
		{"artifacts loaded", artifact.MaxLoaded, 16},
		{"concurrent loads", artifact.MaxConcurrentLoads, 2},
		{"artifact total (256 MiB)", artifact.MaxTotalBytes, 256 << 20},
		{"retry after (5 min)", int64(artifact.RetryAfter), int64(5 * time.Minute)},
		{"render permits min", kv.MinRenderPermits, 4},
		{"render permits max", kv.MaxRenderPermits, 32},
		{"permit wait (20 ms)", int64(kv.PermitWait), int64(20 * time.Millisecond)},
		{"render budget (2 s)", int64(kv.RenderBudget), int64(2 * time.Second)},
		{"template fuel", chattemplate.DefaultFuel, 5_000_000},
		{"template output (1 MiB)", chattemplate.DefaultMaxOutput, 1 << 20},
		{"tokens", tokenize.MaxTokens, 1_048_576},
		{"block size min", kv.MinBlockSize, 16},
		{"block size max", kv.MaxBlockSize, 65536},
		{"block sizes per request", kv.MaxBlockSizesPerRequest, 2},
		{"XXH3 seed", int64(wire.BlockHashSeed("", "")), 1337},
		{"handshake timeout", int64(eventbus.HandshakeTimeout), int64(10 * time.Second)},
		{"keepalive ping", int64(eventbus.KeepalivePing), int64(20 * time.Second)},
		{"hello timeout", int64(eventbus.HelloTimeout), int64(10 * time.Second)},
		{"auth timeout", int64(eventbus.AuthTimeout), int64(10 * time.Second)},
		{"close after last request", int64(eventbus.CloseAfterLastRequest), int64(30 * time.Second)},
		{"listener retry", int64(eventbus.ListenRetry), int64(30 * time.Second)},
		{"revoked credentials remembered", eventbus.RevokedMemory, 256},
		{"open_stream timeout", int64(eventbus.OpenTimeout), int64(30 * time.Second)},
		{"connections min", int64(eventbus.ConnectionLimit(1)), 16},
		{"connections 4x", int64(eventbus.ConnectionLimit(64)), 256},
		{"stream buffer default (64 MiB / 4x1024)", int64(eventbus.StreamBudget(64<<20, 1024)), 16 << 10},
		{"stream buffer floor", int64(eventbus.StreamBudget(64<<20, 65536)), 16 << 10},
		{"stream buffer ceiling", int64(eventbus.StreamBudget(1<<40, 1)), 1 << 20},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

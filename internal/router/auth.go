package router

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/continuum-router/continuum/internal/config"
)

// keyPolicy is one API key's allowance.
type keyPolicy struct {
	hash    [32]byte
	allowed map[string]bool // nil: every backend
	bucket  *tokenBucket    // nil: no rate limit
}

func (k *keyPolicy) allows(backend string) bool {
	return k == nil || k.allowed == nil || k.allowed[backend]
}

// keys matches client credentials against api_keys.
type keys struct {
	list []*keyPolicy
}

// newKeys builds the key policies of cfg. A key of prev whose rate limit
// did not change keeps its bucket, so that a reload does not refill it.
func newKeys(cfg []config.APIKey, prev *keys) *keys {
	ks := &keys{}
	for _, k := range cfg {
		h := strings.TrimPrefix(k.KeyHash, "sha256:")
		raw, err := hex.DecodeString(h)
		if err != nil || len(raw) != 32 {
			continue // validation refuses these
		}
		p := &keyPolicy{}
		copy(p.hash[:], raw)
		if len(k.AllowedBackends) > 0 {
			p.allowed = map[string]bool{}
			for _, b := range k.AllowedBackends {
				p.allowed[b] = true
			}
		}
		if rl := k.RateLimit; rl != nil && rl.RequestsPerSecond > 0 {
			burst := float64(rl.Burst)
			if burst <= 0 {
				burst = math.Ceil(rl.RequestsPerSecond)
			}
			p.bucket = &tokenBucket{rate: rl.RequestsPerSecond, burst: burst, tokens: burst}
			if prev != nil {
				for _, old := range prev.list {
					if old.hash == p.hash && old.bucket != nil && old.bucket.rate == p.bucket.rate && old.bucket.burst == p.bucket.burst {
						p.bucket = old.bucket
					}
				}
			}
		}
		ks.list = append(ks.list, p)
	}
	return ks
}

// open reports whether the router takes requests without a key.
func (ks *keys) open() bool { return len(ks.list) == 0 }

// match returns the policy of the request's bearer token, comparing hashes
// in constant time, or nil.
func (ks *keys) match(r *http.Request) *keyPolicy {
	if len(ks.list) == 0 {
		return nil
	}
	return ks.matchToken(bearerToken(first(r.Header, "Authorization"), first(r.Header, "X-Api-Key")))
}

// matchToken is match for a client's token as bearerToken takes it.
func (ks *keys) matchToken(token string) *keyPolicy {
	if len(ks.list) == 0 || token == "" {
		return nil
	}
	sum := sha256.Sum256([]byte(token))
	var found *keyPolicy
	for _, k := range ks.list {
		if subtle.ConstantTimeCompare(sum[:], k.hash[:]) == 1 {
			found = k
		}
	}
	return found
}

// bearerToken is the client's credential: the bearer token of its
// Authorization field, else its X-Api-Key (the first value of each).
func bearerToken(authorization, apiKey string) string {
	if t, ok := cutBearer(authorization); ok {
		return strings.TrimSpace(t)
	}
	return strings.TrimSpace(apiKey)
}

// cutBearer is the token of an Authorization value of the Bearer scheme,
// whose name is matched in any case (an auth scheme is case-insensitive:
// curl users write "bearer").
func cutBearer(authorization string) (string, bool) {
	const scheme = "Bearer "
	if len(authorization) < len(scheme) || !strings.EqualFold(authorization[:len(scheme)], scheme) {
		return "", false
	}
	return authorization[len(scheme):], true
}

// first is h.Get(key) for a key in canonical form, as the servers' header
// maps hold them, without canonicalizing it again.
func first(h http.Header, key string) string {
	if vs := h[key]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// tokenBucket is a per-key rate limit.
type tokenBucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

// take takes one token, or returns how long until one is available.
func (b *tokenBucket) take(now time.Time) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.last.IsZero() {
		b.tokens = math.Min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	// In seconds first, bounded: a slow enough rate (validation takes any
	// positive one) would overflow a Duration into a negative wait.
	wait := min((1-b.tokens)/b.rate, maxRateWait.Seconds())
	return false, time.Duration(wait * float64(time.Second))
}

// maxRateWait bounds the wait a rate-limited client is told (Retry-After).
const maxRateWait = 24 * time.Hour

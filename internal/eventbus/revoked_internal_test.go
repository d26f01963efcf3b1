package eventbus

import (
	"crypto/sha256"
	"fmt"
	"testing"
)

// TestRevokedSetCountsCredentials: the memory holds RevokedMemory removed
// credentials whatever keys each has, forgets the oldest first, and a key
// revoked again is remembered from its newest revocation.
func TestRevokedSetCountsCredentials(t *testing.T) {
	t.Parallel()
	key := func(kind string, i int) [sha256.Size]byte { return sha256.Sum256(fmt.Appendf(nil, "%s%d", kind, i)) }
	r := newRevokedSet()
	for i := range RevokedMemory {
		r.add(key("cert", i), key("token", i)) // a token entry: both keys
	}
	for i := range RevokedMemory {
		if !r.has(key("cert", i)) || !r.has(key("token", i)) {
			t.Fatalf("credential %d of %d forgotten", i, RevokedMemory)
		}
	}
	// Credential 1 is configured again, then removed again: it becomes the
	// newest, and the next removal forgets credential 0 only.
	r.remove(key("cert", 1))
	r.remove(key("token", 1))
	if r.has(key("token", 1)) {
		t.Fatal("a re-added credential is still revoked")
	}
	r.add(key("cert", 1), key("token", 1))
	// Its old slot comes round next: reusing it forgets nobody.
	r.add(key("cert", RevokedMemory))
	if r.has(key("cert", 0)) || r.has(key("token", 0)) {
		t.Error("the oldest credential is remembered past the memory")
	}
	for i := 1; i <= RevokedMemory; i++ {
		if !r.has(key("cert", i)) {
			t.Fatalf("credential %d forgotten before its turn", i)
		}
	}
	if !r.has(key("token", 1)) {
		t.Error("reusing a credential's old slot forgot its newer revocation")
	}
}

package etcdembed_test

import (
	"net"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/continuum-router/continuum/internal/etcdembed"
)

// TestFirstStartMovesOffATakenPort: a port taken between New and the
// first Start is given up for another; a restart keeps the ports clients
// know.
func TestFirstStartMovesOffATakenPort(t *testing.T) {
	t.Parallel()
	srv, err := etcdembed.New(filepath.Join(t.TempDir(), "etcd"), nil)
	if err != nil {
		t.Fatal(err)
	}
	before := srv.Endpoint()
	u, err := url.Parse(before)
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }()
	if err := srv.Start(); err != nil {
		t.Fatalf("start with its client port taken: %v", err)
	}
	defer srv.Stop()
	after := srv.Endpoint()
	if after == before {
		t.Fatalf("still on the taken %s", before)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if srv.Endpoint() != after {
		t.Errorf("a restart moved from %s to %s", after, srv.Endpoint())
	}
}

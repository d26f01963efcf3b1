package tui_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/tui"
)

// TestRowsBoundedInAll: the 1024-rank cap per worker does not bound
// the fleet view: a worker list of many workers each declaring 1024 ranks
// (16384 of them is 16.7 M rows a poll, from a router or whatever answers
// on --router) makes rows without limit. The rows are bounded in all, at
// the load store's 65536 (worker, rank) keys as the picker bounds its
// candidates (a rank past them never has a sample).
func TestRowsBoundedInAll(t *testing.T) {
	t.Parallel()
	s := fixture(t0, 1)
	for i := range 70 { // 70 × 1024 = 71,680 rows
		s.Workers.Workers = append(s.Workers.Workers,
			worker("prod", "m", "decode", fmt.Sprintf("%x", 0x1000+i), fmt.Sprint(0x1000+i), 0, 1024))
	}
	m := update(newModel(t, 160, 48, nil), tui.SnapshotMsg(s))
	if n := len(m.Rows()); n != admin.MaxRanks {
		t.Fatalf("%d fleet rows, want the %d (worker, rank) keys the router tracks", n, admin.MaxRanks)
	}
	if title := m.View().Content; !strings.Contains(title, "ranks past 65536 not shown") {
		t.Errorf("the rows left out are not said: %.300s", title)
	}
}

package router

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"
	"testing/iotest"
)

// TestReadDeclared: a declared body is read whole, in pieces of any size;
// one that ends early is an error; and a client that declares the most it
// may send and sends little makes the router hold about what it sent, not
// what it declared.
func TestReadDeclared(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 100, wholeBodyAlloc, wholeBodyAlloc + 1, 5<<20 + 3} {
		want := make([]byte, n)
		for i := range want {
			want[i] = byte(rng.IntN(256))
		}
		small := min(n, 4096)
		for _, c := range []struct {
			r    io.Reader
			size int
		}{{bytes.NewReader(want), n}, {iotest.HalfReader(bytes.NewReader(want)), n}, {iotest.OneByteReader(bytes.NewReader(want[:small])), small}} {
			size := int64(c.size)
			got, err := readDeclared(c.r, size)
			if err != nil || !bytes.Equal(got, want[:size]) {
				t.Fatalf("n=%d: %d bytes, %v", n, len(got), err)
			}
		}
		if _, err := readDeclared(bytes.NewReader(want[:n-1]), int64(n)); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("n=%d, one byte short: %v", n, err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := readDeclared(bytes.NewReader(make([]byte, 10)), 32<<20); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("short body: %v", err)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Errorf("10 bytes of a declared 32 MiB allocated %d bytes", grew)
	}
}

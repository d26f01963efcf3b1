package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
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
}

// TestReadDeclaredShortBody: a body far shorter than it declared costs
// what came, not what it declared. Not parallel: it reads the process's
// allocation count, which parallel tests would add to (they run only once
// the sequential ones are done).
func TestReadDeclaredShortBody(t *testing.T) {
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

// promptTextRef and promptIDsRef are the prompt readers as they were
// written with encoding/json alone: the walk in place must read the same
// (but for nulls, which the old reader took for the last string it had
// read, and the walk takes for nothing).
func promptTextRef(q *request) string {
	var parts []string
	add := func(raw json.RawMessage) {
		if string(bytes.TrimSpace(raw)) == "null" {
			return
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			parts = append(parts, s)
			return
		}
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) == nil {
			for _, item := range list {
				if string(item) == "null" {
					continue
				}
				var p struct {
					Text string `json:"text"`
				}
				if json.Unmarshal(item, &p) == nil && p.Text != "" {
					parts = append(parts, p.Text)
				} else if json.Unmarshal(item, &s) == nil {
					parts = append(parts, s)
				}
			}
		}
	}
	for _, m := range q.Messages {
		add(m.Content)
	}
	if len(q.Prompt) > 0 {
		add(q.Prompt)
	}
	return strings.Join(parts, "\n")
}

func promptIDsRef(q *request) int {
	var list []json.RawMessage
	if len(q.Prompt) == 0 || q.Prompt[0] != '[' || json.Unmarshal(q.Prompt, &list) != nil {
		return 0
	}
	n := 0
	for _, item := range list {
		switch {
		case len(item) > 0 && (item[0] == '-' || '0' <= item[0] && item[0] <= '9'):
			n++
		case len(item) > 0 && item[0] == '[':
			var ids []json.RawMessage
			if json.Unmarshal(item, &ids) == nil {
				for _, id := range ids {
					if len(id) > 0 && (id[0] == '-' || '0' <= id[0] && id[0] <= '9') {
						n++
					}
				}
			}
		}
	}
	return n
}

// TestPromptReaders: the prompt's text and token ids are read as before
// from bodies of every shape a prompt or a message's content takes, and a
// prompt of millions of ids is read without an allocation per id.
func TestPromptReaders(t *testing.T) { // not parallel: it counts allocations
	rng := rand.New(rand.NewPCG(7, 8))
	var value func(depth int) string
	value = func(depth int) string {
		switch k := rng.IntN(9); {
		case k < 2:
			return fmt.Sprint(rng.IntN(200000) - 10)
		case k < 4:
			return fmt.Sprintf("%q", []string{"hi", "a b", "", "é\\n", "[1, 2]", `{"text":"x"}`}[rng.IntN(6)])
		case k == 4:
			return []string{"null", "true", "1.5e3", "-0"}[rng.IntN(4)]
		case k == 5:
			return fmt.Sprintf(`{"type":"text","text":%q}`, []string{"part", "", "two words"}[rng.IntN(3)])
		case k == 6:
			return `{"type":"image_url","image_url":{"url":"data:x"}}`
		default:
			if depth > 2 {
				return "7"
			}
			items := make([]string, rng.IntN(5))
			for i := range items {
				items[i] = value(depth + 1)
			}
			return "[ " + strings.Join(items, " ,\n") + " ]"
		}
	}
	for range 3000 {
		body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%s},{"content":%s}],"prompt":%s}`, value(0), value(0), value(0))
		var q request
		if err := decodeRequest([]byte(body), &q); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if got, want := q.promptText(), promptTextRef(&q); got != want {
			t.Fatalf("%s: text %q, want %q", body, got, want)
		}
		if got, want := q.promptIDs(), promptIDsRef(&q); got != want {
			t.Fatalf("%s: %d ids, want %d", body, got, want)
		}
	}
	ids := strings.Repeat("1,", 1<<20) + "1"
	q := request{Prompt: json.RawMessage("[" + ids + "]")}
	if allocs := testing.AllocsPerRun(3, func() { _ = q.promptIDs(); _ = q.promptText() }); allocs > 10 {
		t.Errorf("a prompt of 1Mi ids: %v allocations", allocs)
	}
	if n := q.promptIDs(); n != 1<<20+1 {
		t.Errorf("%d ids", n)
	}
}

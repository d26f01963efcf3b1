package fleetsim

import (
	"net/http"
	"slices"
	"testing"
)

func seqIDs(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

// TestPromptBlocks: a block's engine hash stands for its whole prefix, its
// tokens hash for its own tokens; a partial block has neither; a cache salt
// (another seed) changes both.
func TestPromptBlocks(t *testing.T) {
	a := promptBlocks(seqIDs(0, 50), 16, 1337)
	b := promptBlocks(append(seqIDs(100, 16), seqIDs(16, 34)...), 16, 1337)
	if len(a) != 3 || len(b) != 3 {
		t.Fatalf("%d and %d blocks", len(a), len(b))
	}
	if a[1].tokens != b[1].tokens || a[1].engine == b[1].engine || a[0].engine == a[0].tokens {
		t.Fatalf("same tokens after another prefix: %+v %+v", a[1], b[1])
	}
	if salted := promptBlocks(seqIDs(0, 50), 16, 99); salted[0] == a[0] {
		t.Fatal("the seed changes nothing")
	}
	top := 0
	for i := range 2000 {
		top += int(promptBlocks(seqIDs(i, 16), 16, 1337)[0].engine >> 63)
	}
	if top < 900 || top > 1100 {
		t.Errorf("%d of 2000 engine hashes have the top bit set", top)
	}
}

func engines(bs []promptBlock) []uint64 {
	var out []uint64
	for _, b := range bs {
		out = append(out, b.engine)
	}
	return out
}

// TestBlockCache: the prefix found is the leading cached blocks; new blocks
// are stored in runs; eviction takes the least recently used first, and a
// prefix is more recent than its extensions; a prompt longer than the
// cache keeps its head.
func TestBlockCache(t *testing.T) {
	c := newBlockCache(5)
	p := promptBlocks(seqIDs(0, 64), 16, 1337)                             // 4 blocks
	q := promptBlocks(append(seqIDs(0, 32), seqIDs(500, 32)...), 16, 1337) // shares 2
	u := c.compute(p)
	if u.hit != 0 || len(u.stored) != 1 || u.stored[0].start != 0 || len(u.stored[0].blocks) != 4 || u.evicted != nil {
		t.Fatalf("cold: %+v", u)
	}
	u = c.compute(q)
	// q's 2 new blocks need room for one: the least recently used goes,
	// p's leaf (p touched its blocks last to first).
	if u.hit != 2 || len(u.stored) != 1 || u.stored[0].start != 2 || !slices.Equal(engines(u.stored[0].blocks), engines(q[2:])) ||
		!slices.Equal(u.evicted, []uint64{p[3].engine}) {
		t.Fatalf("shared prefix: %+v", u)
	}
	if got := c.prefix(p); got != 3 {
		t.Fatalf("p's prefix after eviction: %d", got)
	}
	// p again: its prefix is kept from eviction, q's leaf goes.
	u = c.compute(p)
	if u.hit != 3 || !slices.Equal(u.evicted, []uint64{q[3].engine}) || len(u.stored) != 1 || u.stored[0].start != 3 {
		t.Fatalf("p again: %+v", u)
	}
	long := promptBlocks(seqIDs(1000, 16*9), 16, 1337)
	u = c.compute(long)
	if len(u.stored) != 1 || len(u.stored[0].blocks) != 5 || len(u.evicted) != 5 || c.prefix(long) != 5 {
		t.Fatalf("longer than the cache: %+v", u)
	}
	c.clear()
	if c.prefix(long) != 0 {
		t.Fatal("cleared cache still holds blocks")
	}
}

// TestEncodeGenerationPrompt: the simulated frontend adds the generation
// prompt unless the last message is the assistant's, whatever the request
// says of it, as Dynamo's frontend does.
func TestEncodeGenerationPrompt(t *testing.T) {
	e, err := demoEncoder()
	if err != nil {
		t.Fatal(err)
	}
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	want, _, err := e.encode("/v1/chat/completions", []byte(`{`+msgs+`}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		`{` + msgs + `,"add_generation_prompt":false}`,
		`{` + msgs + `,"chat_template_kwargs":{"add_generation_prompt":false}}`,
		`{` + msgs + `,"continue_final_message":true}`,
	} {
		if got, _, err := e.encode("/v1/chat/completions", []byte(body)); err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: ids %v (%v), want %v", body, got, err, want)
		}
	}
	// A conversation ending with the assistant's turn gets no new one, even
	// when the request asks for it.
	end, err := e.tk.Encode("<|im_end|>\n", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, extra := range []string{``, `,"add_generation_prompt":true`} {
		cont, _, err := e.encode("/v1/chat/completions", []byte(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"He"}]`+extra+`}`))
		if err != nil || len(cont) < len(end) || !slices.Equal(cont[len(cont)-len(end):], end) {
			t.Errorf("%q: a continuation opened a new assistant turn: %v (%v)", extra, cont, err)
		}
	}
}

// TestTenantSalt: the emulated frontend takes a non-empty x-tenant-id it
// can read as text as the request's cache salt, as Dynamo's does.
func TestTenantSalt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ value, want string }{
		{"tenant-a", "tenant-a"}, {"", ""}, {"a\tb c", "a\tb c"}, {"t\x80", ""}, {"t\x01", ""},
	} {
		h := http.Header{}
		if c.value != "" {
			h["X-Tenant-Id"] = []string{c.value}
		}
		if got := tenantSalt(h); got != c.want {
			t.Errorf("x-tenant-id %q: salt %q, want %q", c.value, got, c.want)
		}
	}
}

// TestEncodeCompletionBatchOfOne: a completion prompt that is a batch of
// one text or one list of ids is served as that prompt, as Dynamo's
// frontend serves it.
func TestEncodeCompletionBatchOfOne(t *testing.T) {
	t.Parallel()
	e, err := demoEncoder()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{
		{`{"prompt":"Hello, world"}`, `{"prompt":["Hello, world"]}`},
		{`{"prompt":[9707,11,1879]}`, `{"prompt":[[9707,11,1879]]}`},
	} {
		want, _, err := e.encode("/v1/completions", []byte(c[0]))
		if err != nil {
			t.Fatal(err)
		}
		if got, _, err := e.encode("/v1/completions", []byte(c[1])); err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: ids %v (%v), want %v", c[1], got, err, want)
		}
	}
}

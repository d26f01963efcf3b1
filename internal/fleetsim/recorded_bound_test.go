package fleetsim_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/fleetsim"
)

// TestFrontendRecordedBodiesBounded: the emulated frontend remembers its
// requests for the tests, but a demo left running must not hold every
// body it was sent: past a bound, requests are remembered without theirs.
func TestFrontendRecordedBodiesBounded(t *testing.T) {
	t.Parallel()
	d, err := fleetsim.StartDemo(fleetsim.Options{Prefill: 1, Decode: 1, Speed: 100}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	var prefill, decode uint64
	for _, w := range d.Sim.Workers() {
		switch {
		case w.Role == "prefill" && prefill == 0:
			prefill = w.InstanceID
		case w.Role == "decode" && decode == 0:
			decode = w.InstanceID
		}
	}
	pad := strings.Repeat("y", 1<<20)
	for i := range 24 {
		body := `{"model":"Qwen/Qwen3-32B","max_tokens":1,"pad":"` + pad + `","messages":[{"role":"user","content":"q` + strconv.Itoa(i) + `"}]}`
		req, _ := http.NewRequest(http.MethodPost, d.FrontendURL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("x-dynamo-worker-instance-id", strconv.FormatUint(decode, 10))
		req.Header.Set("x-dynamo-prefill-instance-id", strconv.FormatUint(prefill, 10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %s", i, resp.Status)
		}
	}
	held, n := 0, 0
	for _, r := range d.Sim.Frontend(d.Sim.Namespaces()[0]).Requests() {
		held += len(r.Body)
		n++
	}
	if n != 24 || held > 16<<20 {
		t.Fatalf("%d requests remembered holding %d MiB of bodies, want 24 within 16 MiB", n, held>>20)
	}
}

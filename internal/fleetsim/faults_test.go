package fleetsim_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/testutil"
)

// pinnedChat sends a chat completion to url pinned to decode worker id and
// prefill worker prefill.
func pinnedChat(t *testing.T, url string, id, prefill uint64, stream bool, maxTokens int) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(fmt.Sprintf(
		`{"model":"Qwen/Qwen3-32B","stream":%v,"max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, stream, maxTokens)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-dynamo-worker-instance-id", fmt.Sprint(id))
	req.Header.Set("x-dynamo-prefill-instance-id", fmt.Sprint(prefill))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestKilledWorkerEndsItsRequests: a killed worker's requests end with it.
// A stream it was answering is cut (no [DONE]); a buffered request it was
// answering gets the frontend's "instance not found" 500, which a router
// may pin again. Its lease lapses within the TTL, and a request pinned to
// it after that is counted as such.
func TestKilledWorkerEndsItsRequests(t *testing.T) {
	t.Parallel()
	d, err := fleetsim.StartDemo(fleetsim.Options{Prefill: 1, Decode: 2, Store: fleetsim.StoreEtcd, LeaseTTL: 2 * time.Second, FrontendReplicas: 2}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	ws := d.Sim.Workers()
	prefill, victim := ws[0].InstanceID, ws[1].InstanceID

	stream := pinnedChat(t, d.FrontendURL, victim, prefill, true, 200) // 4 s of decode at speed 1
	defer stream.Body.Close()
	if _, err := bufio.NewReader(stream.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	buffered := make(chan *http.Response, 1)
	go func() { buffered <- pinnedChat(t, d.FrontendURL, victim, prefill, false, 200) }()
	testutil.Eventually(t, 10*time.Second, "both requests running", func() bool {
		for _, w := range d.Sim.Workers() {
			if w.InstanceID == victim {
				return w.Pins == 2
			}
		}
		return false
	})
	if err := d.Sim.Inject(victim, fleetsim.FaultKill); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stream.Body)
	if strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("the stream of a killed worker finished: %s", rest)
	}
	resp := <-buffered
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), fleetsim.UnknownInstance(victim)) {
		t.Fatalf("buffered request on the killed worker: %d %s", resp.StatusCode, body)
	}

	testutil.Eventually(t, 10*time.Second, "the killed worker's record gone", func() bool {
		for _, w := range d.Sim.Workers() {
			if w.InstanceID == victim {
				return w.RecordGoneAt != nil
			}
		}
		return false
	})
	late := pinnedChat(t, d.FrontendURL, victim, prefill, false, 1)
	late.Body.Close()
	for _, w := range d.Sim.Workers() {
		if w.InstanceID == victim && (w.PinsAfterGone != 1 || len(w.PinsAfterGoneMS) != 1) {
			t.Fatalf("pins after the record went: %d %v", w.PinsAfterGone, w.PinsAfterGoneMS)
		}
	}
}

// TestFrontendReplicaKillAndRestart: a killed frontend replica refuses
// connections, and comes back on the same address; the router
// configuration lists both replicas in the pool.
func TestFrontendReplicaKillAndRestart(t *testing.T) {
	t.Parallel()
	d, err := fleetsim.StartDemo(fleetsim.Options{Prefill: 1, Decode: 1, FrontendReplicas: 2}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	fs := d.Frontends()
	if len(fs) != 2 || fs[1].Name != "dynamo-frontend-2" || !strings.Contains(d.Config, "backends: [dynamo-frontend, dynamo-frontend-2]") {
		t.Fatalf("replicas %+v, config:\n%s", fs, d.Config)
	}
	post := func(path string) int {
		resp, err := http.Post(fs[0].URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/sim/frontends/dynamo-frontend-2/kill"); code != http.StatusNoContent {
		t.Fatalf("kill: %d", code)
	}
	if _, err := http.Get(fs[1].URL + "/v1/models"); err == nil {
		t.Fatal("a killed replica answered")
	}
	if code := post("/sim/frontends/dynamo-frontend-2/restart"); code != http.StatusNoContent {
		t.Fatalf("restart: %d", code)
	}
	resp, err := http.Get(fs[1].URL + "/v1/models")
	if err != nil {
		t.Fatalf("the restarted replica: %v", err)
	}
	resp.Body.Close()
	var got []fleetsim.FrontendReplica
	r, err := http.Get(fs[0].URL + "/sim/frontends")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	if err := json.NewDecoder(r.Body).Decode(&got); err != nil || len(got) != 2 || !got[1].Up || got[1].Requests != 1 {
		t.Fatalf("replicas %+v (%v)", got, err)
	}
	if code := post("/sim/frontends/nope/kill"); code != http.StatusNotFound {
		t.Fatalf("an unknown replica: %d", code)
	}
}

// TestWorkerLeavesGracefully: a worker that leaves has its records gone at
// once (its lease revoked, long before the TTL), refuses new requests, and
// finishes those it runs.
func TestWorkerLeavesGracefully(t *testing.T) {
	t.Parallel()
	d, err := fleetsim.StartDemo(fleetsim.Options{Prefill: 1, Decode: 2, Store: fleetsim.StoreEtcd, LeaseTTL: time.Minute}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	ws := d.Sim.Workers()
	prefill, leaver := ws[0].InstanceID, ws[1].InstanceID
	stream := pinnedChat(t, d.FrontendURL, leaver, prefill, true, 50) // 1 s of decode
	defer stream.Body.Close()
	r := bufio.NewReader(stream.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := d.Sim.Inject(leaver, fleetsim.FaultLeave); err != nil {
		t.Fatal(err)
	}
	refused := pinnedChat(t, d.FrontendURL, leaver, prefill, false, 1)
	refused.Body.Close()
	if refused.StatusCode != http.StatusInternalServerError {
		t.Fatalf("a request to a worker that left: %d", refused.StatusCode)
	}
	rest, err := io.ReadAll(r)
	if err != nil || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("the stream of a worker that left did not finish (%v): %s", err, rest)
	}
	testutil.Eventually(t, 10*time.Second, "its record gone well before its 1 min lease", func() bool {
		for _, w := range d.Sim.Workers() {
			if w.InstanceID == leaver {
				return w.RecordGoneAt != nil
			}
		}
		return false
	})
}

// TestPrefillKilledAfterHandOver: a prefill worker killed once it has
// handed the KV cache over (the stream has started) does not end the
// request: its decode worker finishes it.
func TestPrefillKilledAfterHandOver(t *testing.T) {
	t.Parallel()
	d, err := fleetsim.StartDemo(fleetsim.Options{Prefill: 1, Decode: 1}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	ws := d.Sim.Workers()
	stream := pinnedChat(t, d.FrontendURL, ws[1].InstanceID, ws[0].InstanceID, true, 25)
	defer stream.Body.Close()
	r := bufio.NewReader(stream.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := d.Sim.Inject(ws[0].InstanceID, fleetsim.FaultKill); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(r)
	if err != nil || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("the stream was cut with its prefill worker (%v): %s", err, rest)
	}
}

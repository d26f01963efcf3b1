package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/cli/serve"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/testutil/kubefake"
)

// TestServeKubernetesPods: serve with the kubernetes_pods source (a fake API
// server over real HTTP, reached through KUBECONFIG as outside a cluster)
// pins requests round-robin to the pods' hashed instance ids, in decimal,
// with no dp-rank header (pods declare none), and reports no load or
// capacity signals.
func TestServeKubernetesPods(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	fake := kubefake.Start(t)
	pods := []struct{ name, ctype string }{
		{"vllm-prefill-0", "prefill"}, {"vllm-prefill-1", "prefill"}, {"vllm-decode-0", "decode"}, {"vllm-decode-1", "decode"},
	}
	var prefill, decode []uint64
	for _, p := range pods {
		fake.Apply(kubefake.Pods, kubefake.Object{
			"metadata": kubefake.Object{"name": p.name, "namespace": "fleet", "labels": kubefake.Object{
				kube.LabelBackend: "kubernetes", kube.LabelEnabled: "true", kube.LabelDynamoNamespace: "dyn",
				kube.LabelComponent: "Vllm" + p.ctype, kube.LabelComponentType: p.ctype}},
			"status": kubefake.Object{"phase": "Running", "conditions": []any{kubefake.Object{"type": "Ready", "status": "True"}}},
		})
		if p.ctype == "prefill" {
			prefill = append(prefill, kube.HashPodName(p.name))
		} else {
			decode = append(decode, kube.HashPodName(p.name))
		}
	}
	t.Setenv("KUBECONFIG", fake.WriteKubeconfig(t))
	fe := fleetsim.NewFrontend()
	feSrv := httptest.NewServer(fe)
	defer feSrv.Close()
	fe.SetWorkers(model, prefill, decode)

	cfgFile := filepath.Join(t.TempDir(), "continuum.yaml")
	cfg := fmt.Sprintf(`
server: {bind_address: "127.0.0.1:0"}
admin: {token: "adm"}
backends:
  - {name: frontend, url: %q, models: [%q]}
disaggregated_serving: {enabled: true}
dynamo:
  enabled: true
  discovery:
    source: kubernetes_pods
    kubernetes: {namespace: fleet, dynamo_namespace: dyn, model: %q}
  shim:
    backends: [frontend]
`, feSrv.URL, model, model)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, done := startServe(t, ctx, &serve.Options{ConfigFile: cfgFile})
	var view admin.WorkersResponse
	testutil.Eventually(t, 20*time.Second, "four pod workers", func() bool {
		req, _ := http.NewRequest(http.MethodGet, base+"/admin/dynamo/workers", nil)
		req.Header.Set("Authorization", "Bearer adm")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&view) == nil && len(view.Workers) == 4 && view.Connected
	})
	if view.Source != "kubernetes_pods" || view.Signals.Load || view.Signals.Capacity {
		t.Fatalf("admin header %+v", view)
	}
	decodes, prefills := map[uint64]int{}, map[uint64]int{}
	for range 8 {
		fe.Reset()
		status := postChat(t, base, model)
		reqs := fe.Requests()
		if status != 200 || len(reqs) != 1 || reqs[0].Worker == nil || reqs[0].Prefill == nil {
			t.Fatalf("status %d, frontend saw %+v", status, reqs)
		}
		h := reqs[0].DynamoHeaders
		if h.Get("x-dynamo-worker-instance-id") != fmt.Sprint(*reqs[0].Worker) || h.Get("x-dynamo-dp-rank") != "" {
			t.Fatalf("headers %v", h)
		}
		decodes[*reqs[0].Worker]++
		prefills[*reqs[0].Prefill]++
	}
	for _, id := range decode {
		if decodes[id] != 4 {
			t.Errorf("decode %d picked %d of 8 times, want 4 (round-robin): %v", id, decodes[id], decodes)
		}
	}
	for _, id := range prefill {
		if prefills[id] != 4 {
			t.Errorf("prefill %d picked %d of 8 times, want 4 (round-robin): %v", id, prefills[id], prefills)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve ended with %v", err)
	}
}

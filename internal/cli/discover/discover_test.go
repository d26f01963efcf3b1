package discover_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/cli/discover"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/testutil/kubefake"
)

func runCLI(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	ios, _, out, errOut := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Env: func(k string) (string, bool) { return os.LookupEnv(k) }}
	code := cli.Run(ctx, f, args)
	return code, out.String(), errOut.String()
}

// loadFixtures writes the put events of fixtures into etcd; the fixtures'
// keys are distinct, except where a later put replaces an earlier one.
func loadFixtures(t *testing.T, c *clientv3.Client, names ...string) {
	t.Helper()
	root := testutil.RepoRoot(t)
	for _, n := range names {
		fx := testutil.LoadDynamoFixture(t, filepath.Join(root, "testdata/dynamo", n))
		for _, e := range fx.Events {
			if e.Put == "" {
				continue
			}
			if _, err := c.Put(context.Background(), e.Put, string(e.Bytes(t))); err != nil {
				t.Fatal(err)
			}
		}
	}
}

var times = regexp.MustCompile(`"(first_seen|last_updated)": "[^"]+"`)

// TestDiscoverJSONAgainstEtcd: the fixtures loaded into a real etcd give
// the expected fleet view and problems through the command.
func TestDiscoverJSONAgainstEtcd(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	loadFixtures(t, c, "basic.yaml", "duplicates.yaml", "join.yaml")
	code, out, errOut := runCLI(t, context.Background(), "discover", "--etcd-endpoints", srv.Endpoint, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep discover.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not the report: %v\n%s", err, out)
	}
	if rep.Source != "etcd" || rep.Generation == 0 || len(rep.Namespaces) != 1 || rep.Namespaces[0] != "dynamo" {
		t.Errorf("header %+v", rep)
	}
	normalised := times.ReplaceAllString(out, `"$1": "<time>"`)
	testutil.Golden(t, filepath.Join(testutil.RepoRoot(t), "testdata/dynamo/golden/discover-etcd.json.golden"), []byte(normalised))
	for _, leak := range []string{"10.0.0.4", "10.0.0.7", "tcp://", "card_json", "transport"} {
		if strings.Contains(out, leak) {
			t.Errorf("output leaks %q", leak)
		}
	}
}

func TestDiscoverTableAndYAML(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	loadFixtures(t, srv.Client(t, clientv3.Config{}), "basic.yaml", "roles.yaml")
	code, out, errOut := runCLI(t, context.Background(), "discover", "--etcd-endpoints", srv.Endpoint)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"NAMESPACE", "Qwen/Qwen3-32B", "decode", "1a7f2b", "2-5", "12000", "role_conflict", "kv_metrics"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCLI(t, context.Background(), "discover", "--etcd-endpoints", srv.Endpoint, "-o", "yaml")
	if code != 0 || !strings.Contains(out, "source: etcd") || !strings.Contains(out, "worker_id: \"1736491\"") {
		t.Errorf("yaml exit %d:\n%s", code, out)
	}
}

// TestDiscoverDialects: workers whose cards write worker_type in each
// dialect Dynamo has shipped (the bitflags names, the lowercase names, and
// legacy cards with only a model_type) show the role their component and
// card give, in the table and in JSON, with no problem.
func TestDiscoverDialects(t *testing.T) {
	t.Setenv("CONTINUUM_CONFIG", "")
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	loadFixtures(t, srv.Client(t, clientv3.Config{}), "dialects.yaml")
	args := []string{"discover", "--etcd-endpoints", srv.Endpoint, "--namespace", "bitflags", "--namespace", "legacy", "--namespace", "lowercase"}
	code, out, errOut := runCLI(t, context.Background(), append(args, "-o", "json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep discover.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := map[string]string{"prefill": "prefill", "decode": "decode", "backend": "aggregated"}
	roles := map[string]int{}
	for _, w := range rep.Workers {
		if w.Role != want[w.Component] {
			t.Errorf("%s/%s %s: role %s, want %s", w.Namespace, w.Component, w.InstanceID, w.Role, want[w.Component])
		}
		roles[w.Namespace+" "+w.Role]++
	}
	if len(rep.Workers) != 9 || len(rep.Problems) != 0 {
		t.Errorf("%d workers (%v), problems %+v", len(rep.Workers), roles, rep.Problems)
	}
	code, out, _ = runCLI(t, context.Background(), args...)
	if code != 0 {
		t.Fatalf("table exit %d", code)
	}
	for _, ns := range []string{"bitflags", "legacy", "lowercase"} {
		for _, role := range []string{"prefill", "decode", "aggregated"} {
			if !regexp.MustCompile(`(?m)^` + ns + `\s.*\s` + role + `\s`).MatchString(out) {
				t.Errorf("table lacks a %s %s worker:\n%s", ns, role, out)
			}
		}
	}
}

// TestDiscoverValueIdentity: through a real etcd, records are joined by
// the identity their values name: a key whose id segment is a decimal
// lease id, or whose shape is not Dynamo's, still gives its worker, two
// such keys claiming one instance are a duplicate, a card whose value
// leaves component and endpoint empty joins by instance id whatever its
// key (and an endpoint whose value writes an empty endpoint is none), and
// a channel whose record names another namespace is its key's namespace's
// publisher.
func TestDiscoverValueIdentity(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	loadFixtures(t, c, "loose_keys.yaml", "legacy_keys.yaml")
	channel := `{"type":"EventChannel","scope":{"kind":"component","namespace":"elsewhere","component":"prefill"},"topic":"kv_metrics","instance_id":11,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.9:4"}}}`
	if _, err := c.Put(context.Background(), "v1/event_channels/namespace/dynamo/component/prefill/topic/kv_metrics/b", channel); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, context.Background(), "discover", "--etcd-endpoints", srv.Endpoint, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep discover.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	workers := map[string]string{}
	for _, w := range rep.Workers {
		workers[w.WorkerID] = w.Role + " " + w.Model
	}
	for id, want := range map[string]string{"7587862386181335300": "prefill m", "4": "decode ", "27": "aggregated x-1b"} {
		if workers[id] != want {
			t.Errorf("worker %s: %q, want %q (all %v)", id, workers[id], want, workers)
		}
	}
	if w, ok := workers["28"]; ok {
		t.Errorf("an endpoint record that writes an empty endpoint is a worker: %s", w)
	}
	var dup bool
	for _, p := range rep.Problems {
		dup = dup || p.Kind == "duplicate" && strings.Join(p.Keys, " ") == "v1/instances/dynamo/worker-a v1/instances/dynamo/worker-b"
		if p.Kind != "duplicate" {
			t.Errorf("problem %+v", p)
		}
	}
	if !dup {
		t.Errorf("no duplicate for worker-a and worker-b: %+v", rep.Problems)
	}
	if len(rep.Publishers) != 1 || rep.Publishers[0].Namespace != "dynamo" || rep.Publishers[0].PublisherID != "11" {
		t.Errorf("publishers %+v", rep.Publishers)
	}
}

// TestDiscoverTableEscapesFleetStrings: keys, component and model names
// read from etcd reach the table and the --watch lines with their control
// characters escaped, so a record cannot clear the screen, retitle the
// terminal or split a row.
func TestDiscoverTableEscapesFleetStrings(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	js := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	comp, model := "de\x1b[2Jcode", "evil\x1b[31mRED\r\nNL\u202e"
	put := func(k, v string) {
		if _, err := c.Put(context.Background(), k, v); err != nil {
			t.Fatal(err)
		}
	}
	put("v1/instances/dynamo/"+comp+"/generate/9", `{"type":"Endpoint","namespace":"dynamo","component":`+js(comp)+`,"endpoint":"generate","instance_id":9}`)
	put("v1/mdc/dynamo/"+comp+"/generate/9", `{"type":"Model","namespace":"dynamo","component":`+js(comp)+`,"endpoint":"generate","instance_id":9,"card_json":{"display_name":`+js(model)+`,"kv_cache_block_size":16,"worker_type":"Decode"}}`)
	put("v1/instances/dynamo/x\x1b]0;TITLE\x07/generate/a", "{")
	code, out, errOut := runCLI(t, context.Background(), "discover", "--etcd-endpoints", srv.Endpoint)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{`evil\x1b[31mRED\x0d\x0aNL\u202e  decode`, `v1/instances/dynamo/x\x1b]0;TITLE\x07/generate/a`} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.ContainsAny(out, "\x1b\x07\r\u202e") {
		t.Errorf("table carries raw control characters: %q", out)
	}

	// The --watch lines escape them as well.
	ios, _, _, _ := iostreams.Test()
	buf := &testutil.SyncBuffer{}
	ios.Out = buf
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := &discover.Options{IO: ios, Env: os.LookupEnv, Logger: func() (*slog.Logger, error) { return slog.New(slog.DiscardHandler), nil },
		Output: "table", Watch: true, Timeout: 10 * time.Second}
	opts.Discovery.EtcdEndpoints = []string{srv.Endpoint}
	done := make(chan error, 1)
	go func() { done <- discover.Run(ctx, opts) }()
	testutil.Eventually(t, 10*time.Second, "first report", func() bool { return strings.Contains(buf.String(), "PROBLEM") })
	put("v1/instances/dynamo/"+comp+"/generate/9", `{"type":"Endpoint","namespace":"dynamo","component":`+js(comp)+`,"endpoint":"generate","instance_id":9`)
	testutil.Eventually(t, 10*time.Second, "watch lines", func() bool {
		return strings.Contains(buf.String(), "problem  malformed")
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if lines := buf.String()[strings.Index(buf.String(), "\ngen ")+1:]; strings.ContainsAny(lines, "\x1b\x07\r\u202e") || !strings.Contains(lines, `evil\x1b[31m`) {
		t.Errorf("watch lines carry raw control characters: %q", lines)
	}
}

// TestDiscoverInterrupted: a signal before the fleet was read ends a
// one-shot discover with exit 1 and says so (its empty output is no fleet);
// a --watch ends with 0, as every interrupted watch does.
func TestDiscoverInterrupted(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		watch bool
		code  int
		want  string
	}{{false, 1, "error: interrupted before the fleet was read\n"}, {true, 0, ""}} {
		args := []string{"discover", "--source", "file", "--file-root", missing, "--log-level", "error"}
		if tc.watch {
			args = append(args, "--watch")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		code, out, errOut := runCLI(t, ctx, args...)
		cancel()
		if code != tc.code || out != "" || errOut != tc.want {
			t.Errorf("watch %v: exit %d, stdout %q, stderr %q", tc.watch, code, out, errOut)
		}
	}
}

// TestDiscoverInvalidConfig: a configuration with errors is refused in one
// line that names the first error where it is, and how many more there are.
func TestDiscoverInvalidConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct{ doc, more string }{
		{"dynamo:\n  enabled: true\n  discovery:\n    source: bogus\n", ""},
		{"dynamo:\n  enabled: true\n  discovery:\n    source: bogus\n  load:\n    max_staleness: -1s\n", " (and 1 more error)"},
	} {
		file := filepath.Join(dir, fmt.Sprintf("c%d.yaml", len(tc.more)))
		if err := os.WriteFile(file, []byte(tc.doc), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runCLI(t, context.Background(), "discover", "--config", file)
		want := "error: " + file + `:4:13: error: dynamo.discovery.source: source "bogus" is not one of etcd, file, kubernetes, kubernetes_pods` +
			tc.more + "; run continuum config validate " + file + "\n"
		if code != 1 || out != "" || errOut != want {
			t.Errorf("exit %d\nstderr %q\nwant   %q", code, errOut, want)
		}
	}
}

func TestDiscoverUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	code, _, errOut := runCLI(t, context.Background(), "discover", "--etcd-endpoints", "http://"+addr, "--timeout", "1s")
	if code != 1 || !strings.Contains(errOut, "not reachable within 1s") || !strings.Contains(errOut, "connection refused") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// The settings' warnings are told, as config validate tells them:
	// here a password sent over plaintext.
	code, _, errOut = runCLI(t, context.Background(), "discover", "--etcd-endpoints", "http://"+addr, "--timeout", "1s", "--etcd-username", "u",
		"--etcd-password-env", "HOME") // a variable that is set
	if code != 1 || !strings.Contains(errOut, "warning: dynamo.discovery.etcd.auth: auth over a plaintext connection") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

// TestDiscoverFileStoreWatch: --watch prints the first report, then each
// change: a JSON object a line with -o json (the report included), a
// further YAML document each with -o yaml.
func TestDiscoverFileStoreWatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ output, report, added string }{
		{"json", `"generation"`, `"event":"added"`},
		{"yaml", "generation:", "---\ngeneration: 2\nevent: added\n"},
	} {
		t.Run(tc.output, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			dir := filepath.Join(root, "v1/instances")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			// A record is written beside the store and renamed into it, so
			// that the watch sees it whole in one event (a file written in
			// place can be seen empty first, a malformed record and a
			// generation of its own).
			scratch := t.TempDir()
			write := func(id int) {
				v := fmt.Sprintf(`{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":%d}`, id)
				name := fmt.Sprintf("dynamo%%2Fdecode%%2Fgenerate%%2F%x", id)
				if err := os.WriteFile(filepath.Join(scratch, name), []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(filepath.Join(scratch, name), filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			write(1)
			ios, _, _, errOut := iostreams.Test()
			out := &testutil.SyncBuffer{}
			ios.Out = out
			f := &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv, Logger: func() (*slog.Logger, error) { return slog.New(slog.DiscardHandler), nil }}
			ctx, cancel := context.WithCancel(context.Background())
			opts := &discover.Options{IO: ios, Env: os.LookupEnv, Logger: f.Logger, Output: tc.output, Watch: true, Timeout: 10 * time.Second}
			opts.Discovery.Source, opts.Discovery.FileRoot = "file", root
			discover.SetChanged(opts, true, true)
			done := make(chan error, 1)
			go func() { done <- discover.Run(ctx, opts) }()
			// The first report is printed before the watch; a new worker
			// follows as an "added" change.
			testutil.Eventually(t, 10*time.Second, "first report", func() bool { return strings.Contains(out.String(), tc.report) })
			write(2)
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("output: %q", out.String())
				}
			})
			testutil.Eventually(t, 10*time.Second, "added change", func() bool { return strings.Contains(out.String(), tc.added) })
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("%v %s", err, errOut)
			}
			if tc.output == "json" {
				// JSON Lines: the first report is a line like the changes.
				lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
				for i, l := range lines {
					var v map[string]any
					if err := json.Unmarshal([]byte(l), &v); err != nil {
						t.Fatalf("line %d is not a JSON object: %v: %q", i+1, err, l)
					}
				}
				if len(lines) < 2 || !strings.HasPrefix(lines[0], `{"source":"file"`) {
					t.Fatalf("want the report, then changes, a line each: %q", out.String())
				}
			}
		})
	}
}

// runReport runs the command (ending in -o json) and returns its report.
func runReport(t *testing.T, args ...string) discover.Report {
	t.Helper()
	code, out, errOut := runCLI(t, context.Background(), args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep discover.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not the report: %v\n%s", err, out)
	}
	return rep
}

// readyPod is a ready worker pod of the fleet's Kubernetes namespace with
// the discovery labels of Dynamo namespace dynNS.
func readyPod(name, dynNS, component, ctype string) kubefake.Object {
	return kubefake.Object{
		"metadata": kubefake.Object{"name": name, "namespace": "fleet", "labels": kubefake.Object{
			"nvidia.com/dynamo-discovery-backend": "kubernetes", "nvidia.com/dynamo-discovery-enabled": "true",
			"nvidia.com/dynamo-namespace": dynNS, "nvidia.com/dynamo-component": component,
			"nvidia.com/dynamo-component-type": ctype,
		}},
		"status": kubefake.Object{"phase": "Running", "conditions": []any{kubefake.Object{"type": "Ready", "status": "True"}}},
	}
}

// TestDiscoverKubernetesPods: `discover --source kubernetes_pods` against a
// fake API server (real HTTP, real client-go) lists the ready worker pods
// with their instance ids in hex and decimal, roles and models.
func TestDiscoverKubernetesPods(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	mk := func(name, component, ctype string) kubefake.Object { return readyPod(name, "dyn", component, ctype) }
	fake.Apply(kubefake.Pods, mk("worker-0", "VllmPrefillWorker", "prefill"))
	fake.Apply(kubefake.Pods, mk("worker-1", "VllmDecodeWorker", "decode"))
	fake.Apply(kubefake.Pods, mk("frontend-0", "Frontend", "frontend"))
	rep := runReport(t, "discover", "--source", "kubernetes_pods",
		"--kubeconfig", fake.WriteKubeconfig(t), "--kube-namespace", "fleet", "--dynamo-namespace", "dyn",
		"--models", "VllmPrefillWorker=solar", "--models", "VllmDecodeWorker=solar", "-o", "json")
	var got []string
	for _, w := range rep.Workers {
		got = append(got, fmt.Sprintf("%s %s %s %s %s", w.InstanceID, w.WorkerID, w.Role, w.Model, w.Component))
	}
	want := []string{
		"15e9c1a30c211e 6167992384364830 decode solar VllmDecodeWorker",
		"43710f49c0cff 1186445869714687 prefill solar VllmPrefillWorker",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("workers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if rep.Source != "kubernetes_pods" || len(rep.Namespaces) != 1 || rep.Namespaces[0] != "dyn" {
		t.Errorf("header %+v", rep)
	}
	code, out, _ := runCLI(t, context.Background(), "discover", "--source", "kubernetes_pods",
		"--kubeconfig", fake.WriteKubeconfig(t), "--kube-namespace", "fleet", "--dynamo-namespace", "dyn", "--model", "solar")
	if code != 0 || !strings.Contains(out, "43710f49c0cff") || !strings.Contains(out, "1186445869714687") {
		t.Fatalf("table exit %d:\n%s", code, out)
	}
	code, _, errOut := runCLI(t, context.Background(), "discover", "--source", "kubernetes_pods",
		"--kubeconfig", fake.WriteKubeconfig(t), "--kube-namespace", "fleet", "--dynamo-namespace", "dyn", "--models", "nope")
	if code == 0 || !strings.Contains(errOut, "COMPONENT=MODEL") {
		t.Fatalf("bad --models: exit %d: %s", code, errOut)
	}
}

// TestDiscoverKubernetesPodsModelsByNamespace: with several Dynamo
// namespaces watched, --models names each component's namespace before a
// '/' (which a label value cannot hold), as the models entries of a file
// must; the same component in two namespaces serves two models.
func TestDiscoverKubernetesPodsModelsByNamespace(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	fake.Apply(kubefake.Pods, readyPod("worker-0", "a", "W", "decode"))
	fake.Apply(kubefake.Pods, readyPod("worker-1", "b", "W", "decode"))
	args := []string{"discover", "--source", "kubernetes_pods", "--kubeconfig", fake.WriteKubeconfig(t), "--kube-namespace", "fleet",
		"--dynamo-namespace", "a", "--dynamo-namespace", "b"}
	rep := runReport(t, append(args, "--models", "a/W=m1", "--models", "b/W=m2", "-o", "json")...)
	var got []string
	for _, w := range rep.Workers {
		got = append(got, w.Namespace+" "+w.Model)
	}
	slices.Sort(got)
	if strings.Join(got, ",") != "a m1,b m2" {
		t.Fatalf("workers %v, want a m1 and b m2", got)
	}
	for _, bad := range []string{"/W=m1", "a/=m1", "W"} {
		if code, _, errOut := runCLI(t, context.Background(), append(args, "--models", bad)...); code == 0 || !strings.Contains(errOut, "[DYNAMO_NAMESPACE/]COMPONENT=MODEL") {
			t.Errorf("--models %q: exit %d: %s", bad, code, errOut)
		}
	}
}

// TestDiscoverKubernetesMetadata: `discover --source kubernetes` over the
// fixture fleet's DynamoWorkerMetadata and EndpointSlice lists the four
// workers with cards, capacity and publishers, and never a pod IP.
func TestDiscoverKubernetesMetadata(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	root := testutil.RepoRoot(t)
	for name, res := range map[string]kubefake.Resource{"dynamoworkermetadatas.json": kubefake.DWMs, "endpointslices.json": kubefake.EndpointSlices} {
		b, err := os.ReadFile(filepath.Join(root, "testdata/kube/fleet", name))
		if err != nil {
			t.Fatal(err)
		}
		var objs []kubefake.Object
		if err := json.Unmarshal(b, &objs); err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			fake.Apply(res, o)
		}
	}
	code, out, errOut := runCLI(t, context.Background(), "discover", "--source", "kubernetes",
		"--kubeconfig", fake.WriteKubeconfig(t), "--kube-namespace", "dynamo", "--dynamo-namespace", "dynamo-qwen3", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep discover.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not the report: %v\n%s", err, out)
	}
	if rep.Source != "kubernetes" || len(rep.Workers) != 4 || len(rep.Publishers) != 5 || len(rep.Problems) != 0 {
		t.Fatalf("report: source %s, %d workers, %d publishers, problems %+v", rep.Source, len(rep.Workers), len(rep.Publishers), rep.Problems)
	}
	roles := map[string]int{}
	for _, w := range rep.Workers {
		roles[w.Role]++
		if w.Model != "Qwen/Qwen3-8B" || w.Capacity.TotalKVBlocks == nil {
			t.Errorf("worker %+v", w)
		}
	}
	if roles["prefill"] != 1 || roles["decode"] != 2 || roles["aggregated"] != 1 {
		t.Fatalf("roles %v", roles)
	}
	for _, leak := range []string{"10.42.", "tcp://", "card_json", "transport"} {
		if strings.Contains(out, leak) {
			t.Errorf("output leaks %q", leak)
		}
	}
}

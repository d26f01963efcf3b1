package pinartifact_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/cli/pinartifact"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/testutil"
)

func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	t.Setenv("CONTINUUM_CONFIG", "")
	ios, _, out, errOut := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := cli.Run(ctx, f, args)
	return code, out.String(), errOut.String()
}

func TestNewCmdPinArtifactFlags(t *testing.T) {
	tests := []struct {
		args    string
		wantErr string
		check   func(*pinartifact.Options) bool
	}{
		{"a.json b.json", "", func(o *pinartifact.Options) bool { return len(o.Inputs) == 2 && !o.YAML }},
		{"--yaml a.json", "", func(o *pinartifact.Options) bool { return o.YAML }},
		{"--from-discovery --etcd-endpoints http://e:2379 --json", "", func(o *pinartifact.Options) bool {
			return o.FromDiscovery && o.JSON && o.Discovery.EtcdEndpoints[0] == "http://e:2379"
		}},
		{"", "at least one PATH or URL", nil},
		{"--from-discovery a.json", "not both", nil},
		{"--from-discovery --yaml", "--yaml pins files you have reviewed", nil},
		{"--yaml --json a.json", "cannot be combined", nil},
		{"--etcd-endpoints http://e:2379 a.json", "--etcd-endpoints needs --from-discovery", nil},
		{"--kube-namespace dynamo a.json", "--kube-namespace needs --from-discovery", nil},
		{"--models decode=m a.json", "--models needs --from-discovery", nil},
		{"--etcd-ca-cert ca.pem a.json", "--etcd-ca-cert needs --from-discovery", nil},
		{"--timeout 5m a.json", "", func(o *pinartifact.Options) bool { return o.Timeout == 5*time.Minute }},
		{"--timeout -1s a.json", "--timeout must not be negative", nil},
	}
	for _, tc := range tests {
		t.Run(tc.args, func(t *testing.T) {
			ios, _, _, _ := iostreams.Test()
			f := &cmdutil.Factory{IOStreams: ios, ConfigPath: func() string { return "" }}
			var got *pinartifact.Options
			cmd := pinartifact.NewCmdPinArtifact(f, func(_ context.Context, o *pinartifact.Options) error { got = o; return nil })
			cmd.SetArgs(strings.Fields(tc.args))
			cmd.SetOut(ios.Out)
			cmd.SetErr(ios.ErrOut)
			err := cmd.Execute()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got == nil || !tc.check(got) {
				t.Fatalf("err %v, opts %+v", err, got)
			}
		})
	}
}

func vectorInput(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// TestHashMatchesB3sum: the digests are the BLAKE3 team's test vectors
// (what b3sum prints), for files, file:// URLs and http URLs, in the
// b3sum line format with the blake3: prefix.
func TestHashMatchesB3sum(t *testing.T) {
	dir := t.TempDir()
	vectors := map[int]string{
		0:      "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262",
		1024:   "42214739f095a406f3fc83deb889744ac00df831c10daa55189b5d121c855af7",
		102400: "bc3e3d41a1146b069abffad3c0d44860cf664390afce4d9661f7902e7943e085",
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n int
		if _, err := fmt.Sscanf(r.URL.Path, "/v/%d", &n); err != nil {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(vectorInput(n))
	}))
	defer srv.Close()
	args := []string{"pin-artifact"}
	var want strings.Builder
	for _, n := range []int{0, 1024, 102400} {
		p := filepath.Join(dir, fmt.Sprintf("in-%d.bin", n))
		if err := os.WriteFile(p, vectorInput(n), 0o600); err != nil {
			t.Fatal(err)
		}
		u := fmt.Sprintf("%s/v/%d", srv.URL, n)
		args = append(args, p, "file://"+p, u)
		for _, name := range []string{p, "file://" + p, u} {
			fmt.Fprintf(&want, "blake3:%s  %s\n", vectors[n], name)
		}
	}
	code, out, errOut := run(t, nil, args...)
	if code != 0 || out != want.String() {
		t.Fatalf("exit %d\n%s\nwant\n%s\nstderr %s", code, out, want.String(), errOut)
	}
	// One input that fails does not hide the others; the exit status is 1.
	code, out, errOut = run(t, nil, "pin-artifact", filepath.Join(dir, "missing"), filepath.Join(dir, "in-0.bin"), srv.URL+"/nope", "nats://x/y")
	if code != 1 || out != "blake3:"+vectors[0]+"  "+filepath.Join(dir, "in-0.bin")+"\n" {
		t.Errorf("exit %d, out %q", code, out)
	}
	for _, frag := range []string{"missing: artifact fetch failed", "/nope: artifact fetch failed", "404", `unsupported artifact: URI scheme "nats"`} {
		if !strings.Contains(errOut, frag) {
			t.Errorf("stderr lacks %q:\n%s", frag, errOut)
		}
	}
}

// TestHashStdin: "-" hashes standard input, as b3sum does, beside other
// inputs.
func TestHashStdin(t *testing.T) {
	t.Setenv("CONTINUUM_CONFIG", "")
	dir := t.TempDir()
	p := filepath.Join(dir, "in-1024.bin")
	if err := os.WriteFile(p, vectorInput(1024), 0o600); err != nil {
		t.Fatal(err)
	}
	ios, in, out, errOut := iostreams.Test()
	in.Write(vectorInput(102400))
	f := &cmdutil.Factory{IOStreams: ios, Env: func(string) (string, bool) { return "", false }}
	code := cli.Run(context.Background(), f, []string{"pin-artifact", "-", p})
	want := "blake3:bc3e3d41a1146b069abffad3c0d44860cf664390afce4d9661f7902e7943e085  -\n" +
		"blake3:42214739f095a406f3fc83deb889744ac00df831c10daa55189b5d121c855af7  " + p + "\n"
	if code != 0 || out.String() != want {
		t.Errorf("exit %d\n%s\nwant\n%s\nstderr %s", code, out.String(), want, errOut.String())
	}
}

// TestHashHF reads hf:// inputs through $HF_ENDPOINT with $HF_TOKEN.
func TestHashHF(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.URL.Path != "/Qwen/Qwen3-0.6B/resolve/main/tokenizer.json" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write(vectorInput(1024))
	}))
	defer srv.Close()
	env := map[string]string{"HF_ENDPOINT": srv.URL, "HF_TOKEN": "tok"}
	code, out, errOut := run(t, env, "pin-artifact", "--json", "hf://Qwen/Qwen3-0.6B/tokenizer.json")
	var got []pinartifact.Digest
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got) != 1 ||
		got[0].Checksum != "blake3:42214739f095a406f3fc83deb889744ac00df831c10daa55189b5d121c855af7" || got[0].Bytes != 1024 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
}

// TestHashTimeout: a remote input that does not come within --timeout
// fails with the deadline, and the inputs after it are still hashed.
func TestHashTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			_, _ = w.Write([]byte("a first part"))
			w.(http.Flusher).Flush()
			<-r.Context().Done() // the rest never comes
			return
		}
		_, _ = w.Write(vectorInput(1024))
	}))
	defer srv.Close()
	code, out, errOut := run(t, nil, "pin-artifact", "--timeout", "1s", srv.URL+"/slow", srv.URL+"/fast")
	if code != 1 || !strings.Contains(errOut, "/slow") || !strings.Contains(errOut, "deadline") ||
		!strings.Contains(out, "blake3:42214739f095a406f3fc83deb889744ac00df831c10daa55189b5d121c855af7") {
		t.Fatalf("exit %d:\n%s\n%s", code, out, errOut)
	}
}

// TestYAMLValidates: the --yaml block is a configuration that `config
// validate` accepts and that pins each file once.
func TestYAMLValidates(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "tokenizer.json"), filepath.Join(dir, "tokenizer_config.json")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, []byte("content of "+filepath.Base(p)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := run(t, nil, "pin-artifact", "--yaml", a, b, a)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Count(out, "- \"blake3:") != 2 || !strings.HasPrefix(out, "dynamo:\n  kv:\n    pinned_artifacts:\n") {
		t.Errorf("block:\n%s", out)
	}
	cfg := filepath.Join(dir, "pins.yaml")
	if err := os.WriteFile(cfg, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	code, vout, verr := run(t, nil, "config", "validate", "--strict", cfg)
	if code != 0 {
		t.Errorf("config validate: exit %d\n%s%s", code, vout, verr)
	}
}

const (
	sumTok  = "blake3:1111111111111111111111111111111111111111111111111111111111111111"
	sumTmpl = "blake3:2222222222222222222222222222222222222222222222222222222222222222"
)

func card(model, worker, tokPath string) string {
	return fmt.Sprintf(`{"display_name":%q,"worker_type":%q,"kv_cache_block_size":16,
	  "tokenizer":{"hf_tokenizer_json":{"path":%q,"checksum":%q,"size":11422654}},
	  "prompt_formatter":{"hf_tokenizer_config_json":{"path":"hf://Qwen/Qwen3-0.6B/tokenizer_config.json","checksum":%q}},
	  "chat_template_file":{"hf_chat_template":{"is_custom":false,"file":{"path":"nats://mdc/chat_template.jinja","checksum":%q}}}}`,
		model, worker, tokPath, sumTok, sumTmpl, sumTmpl)
}

// TestFromDiscovery lists the artifacts of a fleet in a real etcd, per
// model, judged against the configuration's pins.
func TestFromDiscovery(t *testing.T) {
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	put := func(k, v string) {
		if _, err := c.Put(context.Background(), k, v); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range []struct{ comp, role, path string }{
		{"prefill", "Prefill", "/models/qwen/tokenizer.json"},
		{"decode", "Decode", "/models/qwen/tokenizer.json"},
		{"decode", "Decode", "https://10.0.0.9:8000/tokenizer.json?token=s3cret"},
	} {
		id := 100 + i
		put(fmt.Sprintf("v1/instances/dynamo/%s/generate/%x", w.comp, id),
			fmt.Sprintf(`{"type":"Endpoint","namespace":"dynamo","component":%q,"endpoint":"generate","instance_id":%d,"transport":{"tcp":"10.0.0.%d:1/x"}}`, w.comp, id, i))
		put(fmt.Sprintf("v1/mdc/dynamo/%s/generate/%x", w.comp, id),
			fmt.Sprintf(`{"type":"Model","namespace":"dynamo","component":%q,"endpoint":"generate","instance_id":%d,"card_json":%s}`, w.comp, id, card("Qwen/Qwen3-0.6B", w.role, w.path)))
	}
	cfg := filepath.Join(t.TempDir(), "continuum.yaml")
	conf := fmt.Sprintf("dynamo:\n  discovery:\n    etcd:\n      endpoints: [%q]\n  kv:\n    pinned_artifacts:\n      - %q\n      - %q\n", srv.Endpoint, sumTok, sumTmpl)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, nil, "pin-artifact", "--from-discovery", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("a URL query is printed:\n%s", out)
	}
	var rep pinartifact.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Source != "etcd" || len(rep.Models) != 1 || rep.Models[0].Workers != 3 {
		t.Fatalf("report %+v", rep)
	}
	arts := rep.Models[0].Artifacts
	type row struct {
		slot, kind, checksum string
		pinned               bool
		workers              int
		problem              string
	}
	var got []row
	for _, a := range arts {
		got = append(got, row{a.Slot, a.Kind, a.Checksum, a.Pinned, a.Workers, a.Problem})
	}
	want := []row{
		{"tokenizer", "path", sumTok, true, 2, ""},
		{"tokenizer", "https", sumTok, true, 1, ""},
		// Pinned, whatever else stands in the way (a declaration that did
		// not parse included).
		{"prompt_formatter", "hf", sumTmpl, true, 3, "dynamo.kv.allow_hf_artifacts is false"},
		{"chat_template_file", "other", sumTmpl, true, 3, `unsupported artifact: URI scheme "nats"`},
	}
	if len(got) != len(want) {
		t.Fatalf("artifacts %+v", got)
	}
	for i := range want {
		w, g := want[i], got[i]
		if g.slot != w.slot || g.kind != w.kind || g.checksum != w.checksum || g.pinned != w.pinned || g.workers != w.workers || !strings.Contains(g.problem, w.problem) || (w.problem == "" && g.problem != "") {
			t.Errorf("artifact %d = %+v, want %+v", i, g, w)
		}
	}
	if arts[0].Size == nil || *arts[0].Size != 11422654 {
		t.Errorf("size %v", arts[0].Size)
	}
	code, out, errOut = run(t, nil, "pin-artifact", "--from-discovery", "--etcd-endpoints", srv.Endpoint)
	if code != 0 {
		t.Fatalf("table: exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("a URL query is printed:\n%s", out)
	}
	for _, frag := range []string{"1 models, 4 artifacts, 4 unpinned", "PINNED", "Qwen/Qwen3-0.6B", "2/3", "hf_tokenizer_config_json", sumTok, "continuum pin-artifact --yaml"} {
		if !strings.Contains(out, frag) {
			t.Errorf("table lacks %q:\n%s", frag, out)
		}
	}
}

// TestFromDiscoveryInterrupted: a signal before the fleet was read ends
// --from-discovery with exit 1 and says so, not with an empty success.
func TestFromDiscoveryInterrupted(t *testing.T) {
	t.Setenv("CONTINUUM_CONFIG", "")
	ios, _, out, errOut := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Env: func(string) (string, bool) { return "", false }}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	code := cli.Run(ctx, f, []string{"pin-artifact", "--from-discovery", "--source", "file", "--file-root", filepath.Join(t.TempDir(), "missing"), "--log-level", "error"})
	if code != 1 || out.String() != "" || errOut.String() != "error: interrupted before the fleet was read\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestFromDiscoveryTableEscapes: a model name and an artifact path read
// from the fleet's cards reach the table with their control characters
// escaped, so a card cannot drive the terminal or split a row.
func TestFromDiscoveryTableEscapes(t *testing.T) {
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	js := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	cj := card("M", "Decode", "P")
	cj = strings.Replace(cj, `"display_name":"M"`, `"display_name":`+js("evil\x1b[2J\r\nrow"), 1)
	cj = strings.Replace(cj, `"path":"P"`, `"path":`+js("/models/q\x1b]0;t\x07/tokenizer.json"), 1)
	for k, v := range map[string]string{
		"v1/instances/dynamo/decode/generate/9": `{"type":"Endpoint","namespace":"dynamo","component":"decode","endpoint":"generate","instance_id":9}`,
		"v1/mdc/dynamo/decode/generate/9":       `{"type":"Model","namespace":"dynamo","component":"decode","endpoint":"generate","instance_id":9,"card_json":` + cj + `}`,
	} {
		if _, err := c.Put(context.Background(), k, v); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := run(t, nil, "pin-artifact", "--from-discovery", "--etcd-endpoints", srv.Endpoint)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.ContainsAny(out, "\x1b\x07\r") || !strings.Contains(out, `evil\x1b[2J\x0d\x0arow`) || !strings.Contains(out, `/models/q\x1b]0;t\x07/tokenizer.json`) {
		t.Errorf("table:\n%q", out)
	}
}

// TestURLNamesRedacted: a URL input's user info, query and fragment (a
// password, a signed URL's signature) are printed in no output: not in the
// digest line, the --yaml block's comment, the JSON, nor an error.
func TestURLNamesRedacted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v/0" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(vectorInput(0))
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	in := "http://user:pa55@" + host + "/v/0?X-Amz-Signature=s3cret#frag"
	bad := "http://user:pa55@" + host + "/nope?X-Amz-Signature=s3cret"
	for _, args := range [][]string{{in}, {"--yaml", in}, {"--json", in}, {bad}} {
		code, out, errOut := run(t, nil, append([]string{"pin-artifact"}, args...)...)
		if (code == 0) == (args[0] == bad) || strings.Contains(out+errOut, "pa55") || strings.Contains(out+errOut, "s3cret") || strings.Contains(out+errOut, "frag") {
			t.Errorf("%v: exit %d\nstdout %s\nstderr %s", args, code, out, errOut)
		}
		if args[0] != bad && !strings.Contains(out, "http://"+host+"/v/0") {
			t.Errorf("%v: the URL is not named:\n%s", args, out)
		}
	}
}

// TestFetchErrorEscaped: a server answering an http:// input with a status
// line that carries terminal controls is quoted escaped, exit 1.
func TestFetchErrorEscaped(t *testing.T) {
	base := testutil.StatusLineServer(t, "500 bad\x1b]0;owned\x07")
	code, _, errOut := run(t, nil, "pin-artifact", base+"/tokenizer.json")
	if code != 1 || strings.ContainsAny(errOut, "\x1b\x07") || !strings.Contains(errOut, `500 bad\x1b]0;owned\x07`) {
		t.Errorf("exit %d %q", code, errOut)
	}
}

// TestHashLocalOverLimit: a local file past the 64 MiB limit is hashed
// whole with a warning however its location is spelled; a URL scheme is
// case-insensitive, so FILE:// is as local as file://.
func TestHashLocalOverLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.bin")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64<<20 + 1); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// b3sum 1.2.0 (Debian) of 64 MiB + 1 zero bytes.
	const sum = "blake3:3077cccdc36a58fae51b00c551d1f82d26712b1519b6a5efd90c9a86ab057ec4"
	for _, in := range []string{p, "file://" + p, "FILE://" + p} {
		code, out, errOut := run(t, nil, "pin-artifact", in)
		if code != 0 || out != sum+"  "+in+"\n" || !strings.Contains(errOut, "over the 64 MiB artifact limit") {
			t.Errorf("%s: exit %d, out %q, stderr %q", in, code, out, errOut)
		}
	}
}

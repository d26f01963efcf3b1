package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// Demo is a simulated fleet with its frontends (one per namespace) served
// over HTTP, and the router configuration that points at them.
type Demo struct {
	Sim *Sim
	// FrontendURL is the first namespace's frontend; FrontendURLs has all.
	FrontendURL  string
	FrontendURLs map[string]string
	Root         string
	// Config is a complete router configuration (YAML) for the demo.
	Config  string
	servers []*http.Server
}

// DemoAdminToken is the admin token of the demo configuration.
const DemoAdminToken = "demo"

// StartDemo starts a simulated fleet registered in a temporary file store,
// and a direct-mode frontend per namespace on loopback ports; bind is the
// router address the configuration names.
func StartDemo(o Options, bind string) (*Demo, error) {
	return StartDemoOn(o, bind, "127.0.0.1:0")
}

// StartDemoOn is StartDemo with the first frontend's listen address (the
// others take free loopback ports).
func StartDemoOn(o Options, bind, frontendBind string) (*Demo, error) {
	root, err := os.MkdirTemp("", "continuum-demo-")
	if err != nil {
		return nil, err
	}
	o.Root = root
	sim, err := Start(o)
	if err != nil {
		_ = os.RemoveAll(root)
		return nil, err
	}
	d := &Demo{Sim: sim, Root: root, FrontendURLs: map[string]string{}}
	for i, ns := range sim.Namespaces() {
		addr := "127.0.0.1:0"
		if i == 0 {
			addr = frontendBind
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			d.Stop()
			return nil, err
		}
		srv := &http.Server{Handler: sim.Handler(ns), ReadHeaderTimeout: 10 * time.Second}
		d.servers = append(d.servers, srv)
		go func() { _ = srv.Serve(ln) }()
		d.FrontendURLs[ns] = "http://" + ln.Addr().String()
		if i == 0 {
			d.FrontendURL = d.FrontendURLs[ns]
		}
	}
	d.Config = d.config(bind)
	return d, nil
}

func quoted(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// config renders the router configuration: one frontend backend per
// namespace, and shim pools when there are several.
func (d *Demo) config(bind string) string {
	var b strings.Builder
	namespaces := d.Sim.Namespaces()
	fmt.Fprintf(&b, `# The embedded demo configuration of continuum serve --demo.
server:
  bind_address: %q
admin:
  token: %q
backends:
`, bind, DemoAdminToken)
	name := func(ns string) string {
		if len(namespaces) == 1 {
			return "dynamo-frontend"
		}
		return "dynamo-frontend-" + ns
	}
	for _, ns := range namespaces {
		fmt.Fprintf(&b, "  - name: %s\n    type: openai\n    url: %q\n    models: %s\n", name(ns), d.FrontendURLs[ns], quoted(d.Sim.Models()))
	}
	b.WriteString(`disaggregated_serving:
  enabled: true
dynamo:
  enabled: true
  discovery:
`)
	if ep := d.Sim.EtcdEndpoint(); ep != "" {
		fmt.Fprintf(&b, "    source: etcd\n    etcd:\n      endpoints: [%q]\n", ep)
	} else {
		fmt.Fprintf(&b, "    source: file\n    file:\n      root: %q\n", d.Root)
	}
	if len(namespaces) == 1 {
		fmt.Fprintf(&b, "      namespace: %q\n", namespaces[0])
	} else {
		fmt.Fprintf(&b, "      namespaces: %s\n", quoted(namespaces))
	}
	b.WriteString(`  load:
    max_staleness: "3s"
    direct_allow_cidrs: ["127.0.0.0/8"]
  shim:
`)
	if len(namespaces) == 1 {
		fmt.Fprintf(&b, "    backends: [%s]\n", name(namespaces[0]))
	} else {
		b.WriteString("    pools:\n")
		for _, ns := range namespaces {
			fmt.Fprintf(&b, "      - {namespace: %q, backends: [%s]}\n", ns, name(ns))
		}
	}
	if !d.Sim.opts.NoKV {
		// KV-aware routing over the workers' kv-events, with the tokenizer
		// files their cards declare pinned.
		a := d.Sim.Artifacts()
		fmt.Fprintf(&b, `  kv:
    enabled: true
    pinned_artifacts:
      - %q  # %s
      - %q  # %s
`, a.Tokenizer.Checksum, TokenizerFile, a.TokenizerConfig.Checksum, TokenizerConfigFile)
	}
	return b.String()
}

// Stop stops the frontends and the fleet and removes the file store.
func (d *Demo) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range d.servers {
		if err := s.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = s.Close()
		}
	}
	d.Sim.Stop()
	_ = os.RemoveAll(d.Root)
}

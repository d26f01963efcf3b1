package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// Demo is a simulated fleet with its frontend served over HTTP, and the
// router configuration that points at both.
type Demo struct {
	Sim         *Sim
	FrontendURL string
	Root        string
	// Config is a complete router configuration (YAML) for the demo.
	Config string
	server *http.Server
}

// DemoAdminToken is the admin token of the demo configuration.
const DemoAdminToken = "demo"

// StartDemo starts a fleet of o.Prefill prefill and o.Decode decode workers
// registered in a temporary file store, and a direct-mode frontend over it
// on a loopback port; bind is the router address the configuration names.
func StartDemo(o Options, bind string) (*Demo, error) {
	return StartDemoOn(o, bind, "127.0.0.1:0")
}

// StartDemoOn is StartDemo with the frontend's listen address.
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
	ln, err := net.Listen("tcp", frontendBind)
	if err != nil {
		sim.Stop()
		_ = os.RemoveAll(root)
		return nil, err
	}
	d := &Demo{Sim: sim, Root: root, FrontendURL: "http://" + ln.Addr().String(),
		server: &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = d.server.Serve(ln) }()
	d.Config = fmt.Sprintf(`# The embedded demo configuration of continuum serve --demo.
server:
  bind_address: %q
admin:
  token: %q
backends:
  - name: dynamo-frontend
    type: openai
    url: %q
    models: [%q]
disaggregated_serving:
  enabled: true
dynamo:
  enabled: true
  discovery:
    source: file
    file:
      root: %q
      namespace: %q
  load:
    max_staleness: "3s"
    direct_allow_cidrs: ["127.0.0.0/8"]
  shim:
    backends: [dynamo-frontend]
`, bind, DemoAdminToken, d.FrontendURL, sim.Model(), root, sim.opts.Namespace)
	return d, nil
}

// Stop stops the frontend and the fleet and removes the file store.
func (d *Demo) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.server.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = d.server.Close()
	}
	d.Sim.Stop()
	_ = os.RemoveAll(d.Root)
}

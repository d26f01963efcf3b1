package fleetsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	Config string
	// replicas are the frontend replicas, each namespace's in order.
	replicas []*replica
}

// replica is one frontend replica: a listener serving a namespace's
// frontend (and the control API), which can be killed and restarted on
// the same address.
type replica struct {
	name, namespace, addr string
	handler               http.Handler
	requests              atomic.Uint64
	mu                    sync.Mutex
	srv                   *http.Server // nil while killed
}

// FrontendReplica is one frontend replica as GET /sim/frontends lists it.
type FrontendReplica struct {
	// Name is the replica's backend name in the router configuration.
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	URL       string `json:"url"`
	Up        bool   `json:"up"`
	// Requests counts the requests it received.
	Requests uint64 `json:"requests"`
}

// ErrNoReplica is returned for an unknown frontend replica.
var ErrNoReplica = errors.New("no such frontend replica")

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
	sweepDemoDirs(os.TempDir())
	root, err := os.MkdirTemp("", demoDirPattern)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(root, demoOwnerFile), []byte(demoOwner(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(root)
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
		for n := range sim.opts.FrontendReplicas {
			addr := "127.0.0.1:0"
			if i == 0 && n == 0 {
				addr = frontendBind
			}
			rp := &replica{name: replicaName(sim.Namespaces(), ns, n), namespace: ns, addr: addr}
			rp.handler = d.replicaHandler(rp, sim.Handler(ns))
			if err := rp.start(); err != nil {
				d.Stop()
				return nil, err
			}
			d.replicas = append(d.replicas, rp)
			if n == 0 {
				d.FrontendURLs[ns] = "http://" + rp.addr
			}
		}
		if i == 0 {
			d.FrontendURL = d.FrontendURLs[ns]
		}
	}
	d.Config = d.config(bind)
	return d, nil
}

// A demo's directory is named by demoDirPattern and holds, in
// demoOwnerFile, the process that made it (demoOwner).
const (
	demoDirPattern = "continuum-demo-"
	demoOwnerFile  = "owner.pid"
)

// demoOwner names process pid of this host: its id and the host's name,
// since a process id means nothing in another container sharing the
// temporary directory.
func demoOwner(pid int) string {
	host, _ := os.Hostname()
	return strconv.Itoa(pid) + " " + host + "\n"
}

// sweepDemoDirs removes the directories earlier demos left in dir when
// their process is gone: a demo ended by what it cannot catch (SIGKILL,
// the OOM killer, SIGPIPE from a closed stdout) leaves its file store,
// tokenizer files and etcd data behind. A directory without an owner, of
// another host, or whose owner runs (or belongs to another user, who may
// still run it), is kept.
func sweepDemoDirs(dir string) {
	matches, _ := filepath.Glob(filepath.Join(dir, demoDirPattern+"*"))
	for _, m := range matches {
		b, err := os.ReadFile(filepath.Join(m, demoOwnerFile))
		if err != nil || len(b) > 512 {
			continue
		}
		id, _, _ := strings.Cut(string(b), " ")
		pid, err := strconv.Atoi(id)
		if err != nil || pid <= 0 || pid == os.Getpid() || string(b) != demoOwner(pid) {
			continue
		}
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			_ = os.RemoveAll(m)
		}
	}
}

// replicaName is the backend name of a namespace's replica n (from 0).
func replicaName(namespaces []string, ns string, n int) string {
	name := "dynamo-frontend"
	if len(namespaces) > 1 {
		name += "-" + ns
	}
	if n > 0 {
		name += fmt.Sprintf("-%d", n+1)
	}
	return name
}

// start listens on the replica's address (a free port the first time,
// the same one after a kill) and serves.
func (rp *replica) start() error {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.srv != nil {
		return nil
	}
	ln, err := net.Listen("tcp", rp.addr)
	if err != nil {
		return fmt.Errorf("frontend replica %s: %w", rp.name, err)
	}
	rp.addr = ln.Addr().String()
	srv := &http.Server{Handler: rp.handler, ReadHeaderTimeout: 10 * time.Second}
	rp.srv = srv
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// kill closes the replica's listener and every connection it holds, as a
// killed process's are: requests in flight through it are cut.
func (rp *replica) kill() {
	rp.mu.Lock()
	srv := rp.srv
	rp.srv = nil
	rp.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

func (rp *replica) info() FrontendReplica {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return FrontendReplica{Name: rp.name, Namespace: rp.namespace, URL: "http://" + rp.addr, Up: rp.srv != nil, Requests: rp.requests.Load()}
}

// Frontends lists the frontend replicas.
func (d *Demo) Frontends() []FrontendReplica {
	out := make([]FrontendReplica, 0, len(d.replicas))
	for _, rp := range d.replicas {
		out = append(out, rp.info())
	}
	return out
}

// FrontendFault kills ("kill") or restarts ("restart") the frontend
// replica with the backend name name.
func (d *Demo) FrontendFault(name, fault string) error {
	for _, rp := range d.replicas {
		if rp.name != name {
			continue
		}
		switch fault {
		case "kill":
			rp.kill()
			return nil
		case "restart":
			return rp.start()
		default:
			return fmt.Errorf("unknown frontend fault %q: want kill or restart", fault)
		}
	}
	return ErrNoReplica
}

// replicaHandler serves a replica: the frontend replicas' control API
// (GET /sim/frontends, POST /sim/frontends/{name}/{kill|restart}) and
// the namespace's frontend with the fleet's control API, counting the
// requests the replica receives.
func (d *Demo) replicaHandler(rp *replica, next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sim/frontends", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(d.Frontends())
	})
	mux.HandleFunc("POST /sim/frontends/{name}/{fault}", func(w http.ResponseWriter, r *http.Request) {
		if err := d.FrontendFault(r.PathValue("name"), r.PathValue("fault")); err != nil {
			code := http.StatusBadRequest
			if errors.Is(err, ErrNoReplica) {
				code = http.StatusNotFound
			}
			http.Error(w, err.Error(), code)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/sim/") {
			rp.requests.Add(1)
		}
		next.ServeHTTP(w, r)
	}))
	return mux
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
	names := map[string][]string{} // each namespace's replicas
	for _, rp := range d.replicas {
		names[rp.namespace] = append(names[rp.namespace], rp.name)
		// The frontend emulator serves chat completions only: Responses
		// requests are converted by the router.
		fmt.Fprintf(&b, "  - name: %s\n    type: openai\n    url: %q\n    models: %s\n    responses_api: chat\n", rp.name, "http://"+rp.addr, quoted(d.Sim.Models()))
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
		fmt.Fprintf(&b, "    backends: [%s]\n", strings.Join(names[namespaces[0]], ", "))
	} else {
		b.WriteString("    pools:\n")
		for _, ns := range namespaces {
			fmt.Fprintf(&b, "      - {namespace: %q, backends: [%s]}\n", ns, strings.Join(names[ns], ", "))
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
	for _, rp := range d.replicas {
		rp.mu.Lock()
		srv := rp.srv
		rp.srv = nil
		rp.mu.Unlock()
		if srv == nil {
			continue
		}
		if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = srv.Close()
		}
	}
	d.Sim.Stop()
	_ = os.RemoveAll(d.Root)
}

// Package kubeapi runs a real kube-apiserver for integration tests: the
// upstream server built by scripts/kube-apiserver/build.sh, over an
// in-process etcd, on loopback with a generated serving certificate, static
// token authentication and RBAC authorization, auditing every request of the
// router's service account (Requests, Forbidden). Only tests import it.
//
// The binary is found through $CONTINUUM_KUBE_APISERVER or where
// scripts/kube-apiserver/build.sh puts it: kube-apiserver-<version>/ in the
// cache directory (testutil.CacheDir), <version> being the k8s.io/kubernetes
// requirement of scripts/kube-apiserver/go.mod. Without it Start skips the
// test with the reason, unless CONTINUUM_REQUIRE_KUBE=1 or CI is set, when
// it fails (`make test-kube` builds the server and sets the former).
package kubeapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/continuum-router/continuum/internal/loopport"
	"github.com/continuum-router/continuum/internal/testutil"
)

// Users of the static token file.
const (
	// AdminUser is in group system:masters: everything is allowed.
	AdminUser = "admin"
	// FleetNamespace is the Kubernetes namespace Start creates for the fleet
	// and the namespace of the service account below.
	FleetNamespace = "dynamo"
	// ServiceAccountName is the router's ServiceAccount in FleetNamespace
	// (the name the deployment manifests under scripts/deploy use).
	ServiceAccountName = "continuum"
	// ServiceAccountUser authenticates as that ServiceAccount would: RBAC
	// matches ServiceAccount subjects by this user name. It is in no group
	// beyond system:authenticated, so it may do only what Roles grant it.
	ServiceAccountUser = "system:serviceaccount:" + FleetNamespace + ":" + ServiceAccountName
)

// Environment variables.
const (
	EnvBinary  = "CONTINUUM_KUBE_APISERVER"
	EnvKubectl = "CONTINUUM_KUBECTL"
	EnvRequire = "CONTINUUM_REQUIRE_KUBE"
)

// Bounds of the harness.
const (
	readyTimeout = 120 * time.Second // two shared cores start the server in 10-30 s
	stopGrace    = 15 * time.Second
	logTail      = 8 << 10
)

// Server is one running kube-apiserver and its etcd.
type Server struct {
	// URL is the server's https:// address on 127.0.0.1.
	URL string
	// CAFile verifies the serving certificate.
	CAFile string
	// Etcd is the server's storage; EtcdClient writes to it directly (see
	// Compact).
	Etcd       *testutil.Etcd
	EtcdClient *clientv3.Client

	dir    string
	tokens map[string]string // user → bearer token
	cmd    *exec.Cmd
	log    *os.File
	done   chan struct{}
	err    error // the process's exit, once done is closed

	mu     sync.Mutex
	mapper meta.ResettableRESTMapper
}

// Binary returns the kube-apiserver to run, or "" and why there is none.
func Binary() (string, string) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Sprintf("%s=%s: %v", EnvBinary, p, err)
		}
		return p, ""
	}
	p, err := BuiltBinary()
	if err != nil {
		return "", err.Error()
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Sprintf("no kube-apiserver at %s and %s is unset: run scripts/kube-apiserver/build.sh (or make test-kube)", p, EnvBinary)
	}
	return p, ""
}

// BuiltBinary is where scripts/kube-apiserver/build.sh puts the server
// (what `build.sh --path` prints), built or not.
func BuiltBinary() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	version, err := kubernetesVersion(filepath.Join(root, "scripts", "kube-apiserver", "go.mod"))
	if err != nil {
		return "", err
	}
	cache, err := testutil.CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "kube-apiserver-"+version, "kube-apiserver"), nil
}

// Kubectl returns the upstream kubectl that scripts/kube-apiserver/build.sh
// builds beside the server (of the server's version: beside
// $CONTINUUM_KUBE_APISERVER when that is set), or $CONTINUUM_KUBECTL;
// without one it skips the test, or fails it where Start would.
func Kubectl(t testing.TB) string {
	t.Helper()
	p := os.Getenv(EnvKubectl)
	var err error
	if p == "" {
		server := os.Getenv(EnvBinary)
		if server == "" {
			server, err = BuiltBinary()
		}
		p = filepath.Join(filepath.Dir(server), "kubectl")
	}
	if err == nil {
		_, err = os.Stat(p)
	}
	if err != nil {
		why := fmt.Sprintf("no kubectl (%v): run scripts/kube-apiserver/build.sh (or make test-kube), or set %s", err, EnvKubectl)
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("kubectl required (%s=1): %s", EnvRequire, why)
		}
		testutil.SkipOrFailInCI(t, "skipping: %s", why)
	}
	return p
}

// kubernetesVersion returns the k8s.io/kubernetes version the wrapper
// module's go.mod requires: the one build.sh builds and names its directory by.
func kubernetesVersion(gomod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) >= 2 && f[0] == "k8s.io/kubernetes" && strings.HasPrefix(f[1], "v") {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s requires no k8s.io/kubernetes version", gomod)
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Start runs etcd and kube-apiserver for the test, waits until /readyz
// answers, creates FleetNamespace, and stops the server (before etcd) when
// the test ends. Watches are served from etcd directly (--watch-cache=false)
// so that Compact makes a watch from an older resourceVersion end in 410 Gone.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, why := Binary()
	if bin == "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("kube-apiserver required (%s=1): %s", EnvRequire, why)
		}
		testutil.SkipOrFailInCI(t, "skipping: %s", why)
	}
	etcd := testutil.StartEtcd(t, testutil.EtcdOptions{})
	s := &Server{
		Etcd:       etcd,
		EtcdClient: etcd.Client(t, clientv3.Config{}),
		dir:        t.TempDir(),
		tokens:     map[string]string{AdminUser: randomToken(t), ServiceAccountUser: randomToken(t)},
	}
	pki := testutil.NewTestPKI(t)
	s.CAFile = pki.CAFile
	s.writeFiles(t)

	// The port is found free and handed to the server; another process may
	// take it in between, so a failed bind is retried on a fresh port.
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = s.start(t, bin, pki); err == nil {
			break
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	s.ApplyYAML(t, fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", FleetNamespace))
	return s
}

func randomToken(t testing.TB) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// writeFiles writes the token file and the service-account key pair.
func (s *Server) writeFiles(t testing.TB) {
	t.Helper()
	// token,user,uid,"group,group"
	var tok bytes.Buffer
	fmt.Fprintf(&tok, "%s,%s,%s,\"system:masters\"\n", s.tokens[AdminUser], AdminUser, "uid-admin")
	fmt.Fprintf(&tok, "%s,%s,%s\n", s.tokens[ServiceAccountUser], ServiceAccountUser, "uid-continuum")
	write(t, filepath.Join(s.dir, "tokens.csv"), tok.Bytes())

	// Every request of the service account is audited (see Requests).
	write(t, filepath.Join(s.dir, "audit-policy.yaml"), []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    users: ["`+ServiceAccountUser+`"]
  - level: None
`))

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(s.dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	write(t, filepath.Join(s.dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
}

func write(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// start runs the process and waits for /readyz. On failure the process is
// stopped and the error carries the end of its log.
func (s *Server) start(t testing.TB, bin string, pki *testutil.TestPKI) error {
	port, err := loopport.Free()
	if err != nil {
		return err
	}
	s.URL = "https://127.0.0.1:" + strconv.Itoa(port)
	logPath := filepath.Join(s.dir, fmt.Sprintf("kube-apiserver-%d.log", port))
	s.log, err = os.Create(logPath)
	if err != nil {
		return err
	}
	args := []string{
		"--etcd-servers=" + s.Etcd.Endpoint,
		"--etcd-prefix=/registry",
		"--etcd-compaction-interval=0", // only Compact compacts
		"--watch-cache=false",
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + pki.ServerCert,
		"--tls-private-key-file=" + pki.ServerKey,
		"--cert-dir=" + filepath.Join(s.dir, "certs"),
		"--token-auth-file=" + filepath.Join(s.dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--anonymous-auth=false",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(s.dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(s.dir, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/24",
		"--endpoint-reconciler-type=none",
		// No controller manager creates the namespaces' default
		// ServiceAccounts, so pods are admitted without one.
		"--disable-admission-plugins=ServiceAccount",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--audit-policy-file=" + filepath.Join(s.dir, "audit-policy.yaml"),
		"--audit-log-path=" + s.auditLog(),
		"--audit-log-format=json",
		"--audit-log-mode=blocking",
		"--v=1",
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout = s.log
	s.cmd.Stderr = s.log
	s.cmd.SysProcAttr = sysProcAttr()
	if err := s.cmd.Start(); err != nil {
		_ = s.log.Close()
		return fmt.Errorf("start %s: %w", bin, err)
	}
	s.done = make(chan struct{})
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(); err != nil {
		s.stop()
		return fmt.Errorf("kube-apiserver: %w\n--- end of %s:\n%s", err, logPath, tail(logPath))
	}
	// Registered after StartEtcd's cleanup, so it runs first: the server
	// stops before its etcd.
	t.Cleanup(s.stop)
	return nil
}

// waitReady polls /readyz until it answers 200, the process exits or
// readyTimeout passes.
func (s *Server) waitReady() error {
	client, err := rest.HTTPClientFor(s.AdminConfig())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body)
		} else {
			last = err.Error()
		}
		select {
		case <-s.done:
			if s.err == nil {
				return errors.New("exited before ready, with status 0")
			}
			return fmt.Errorf("exited before ready: %w", s.err)
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s: last /readyz %s", readyTimeout, last)
		case <-tick.C:
		}
	}
}

// stop ends the process: SIGTERM, then SIGKILL after stopGrace.
func (s *Server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(stopGrace):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	_ = s.log.Close()
}

func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(data) > logTail {
		data = data[len(data)-logTail:]
	}
	return string(data)
}

// Token returns the bearer token of AdminUser or ServiceAccountUser.
func (s *Server) Token(user string) string { return s.tokens[user] }

// AdminConfig is a client configuration with every permission.
func (s *Server) AdminConfig() *rest.Config { return s.UserConfig(s.tokens[AdminUser]) }

// ServiceAccountConfig is the router's configuration: ServiceAccountUser,
// holding only what Roles bound to the ServiceAccount grant.
func (s *Server) ServiceAccountConfig() *rest.Config {
	return s.UserConfig(s.tokens[ServiceAccountUser])
}

// UserConfig is a client configuration authenticating with token.
func (s *Server) UserConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            s.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile},
		QPS:             -1, // no client-side rate limit in tests
	}
}

// WriteKubeconfig writes a kubeconfig file for user (AdminUser or
// ServiceAccountUser) into the test's temp dir and returns its path. Its one
// context, "kubeapi", has FleetNamespace as its namespace.
func (s *Server) WriteKubeconfig(t testing.TB, user string) string {
	t.Helper()
	tok, ok := s.tokens[user]
	if !ok {
		t.Fatalf("kubeapi: no user %q (want %q or %q)", user, AdminUser, ServiceAccountUser)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubeapi"] = &clientcmdapi.Cluster{Server: s.URL, CertificateAuthority: s.CAFile}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: tok}
	cfg.Contexts["kubeapi"] = &clientcmdapi.Context{Cluster: "kubeapi", AuthInfo: user, Namespace: FleetNamespace}
	cfg.CurrentContext = "kubeapi"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// Clientset is a typed client with AdminConfig.
func (s *Server) Clientset(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	c, err := kubernetes.NewForConfig(s.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Compact compacts etcd past every revision so far: a watch from any
// resourceVersion seen before the call then ends in 410 Gone. It returns the
// compaction revision.
//
// The server opens an etcd watch at resourceVersion+1; etcd refuses it as
// compacted only when that revision is below the compaction revision, so two
// writes outside the server's prefix move the revision on before compacting.
func (s *Server) Compact(t testing.TB) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rev int64
	for i := range 2 {
		resp, err := s.EtcdClient.Put(ctx, "/continuum-kubeapi/compact", strconv.Itoa(i))
		if err != nil {
			t.Fatalf("kubeapi: etcd put: %v", err)
		}
		rev = resp.Header.Revision
	}
	if _, err := s.EtcdClient.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("kubeapi: compact at %d: %v", rev, err)
	}
	return rev
}

func (s *Server) auditLog() string { return filepath.Join(s.dir, "audit.log") }

// Request is one audited request of ServiceAccountUser.
type Request struct {
	Verb        string // get, list, watch, create, patch, ...
	Group       string // "" for the core group
	Resource    string
	Subresource string
	Namespace   string
	Name        string
	Code        int // the response status; 0 when none was recorded
	URI         string
}

func (r Request) String() string {
	res := r.Resource
	if r.Group != "" {
		res += "." + r.Group
	}
	if r.Subresource != "" {
		res += "/" + r.Subresource
	}
	return fmt.Sprintf("%s %s in %q: %d", r.Verb, res, r.Namespace, r.Code)
}

// Requests returns the requests ServiceAccountUser has made so far, in
// order, from the server's audit log: with Forbidden, what shows that a
// component asks for nothing beyond its Role. A request still in progress
// (an open watch) is listed with the status it started with.
func (s *Server) Requests(t testing.TB) []Request {
	t.Helper()
	data, err := os.ReadFile(s.auditLog())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		t.Fatal(err)
	}
	var out []Request
	index := map[string]int{} // audit id → position in out
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var ev struct {
			AuditID    string `json:"auditID"`
			Stage      string `json:"stage"`
			RequestURI string `json:"requestURI"`
			Verb       string `json:"verb"`
			User       struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef *struct {
				Resource    string `json:"resource"`
				Namespace   string `json:"namespace"`
				Name        string `json:"name"`
				APIGroup    string `json:"apiGroup"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
			ResponseStatus *struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			continue // a line being written
		}
		if ev.User.Username != ServiceAccountUser {
			continue
		}
		r := Request{Verb: ev.Verb, URI: ev.RequestURI}
		if o := ev.ObjectRef; o != nil {
			r.Group, r.Resource, r.Subresource, r.Namespace, r.Name = o.APIGroup, o.Resource, o.Subresource, o.Namespace, o.Name
		}
		if ev.ResponseStatus != nil {
			r.Code = ev.ResponseStatus.Code
		}
		if i, ok := index[ev.AuditID]; ok {
			out[i] = r // ResponseComplete after ResponseStarted
			continue
		}
		index[ev.AuditID] = len(out)
		out = append(out, r)
	}
	return out
}

// Forbidden returns the requests of ServiceAccountUser answered 403.
func (s *Server) Forbidden(t testing.TB) []Request {
	t.Helper()
	var out []Request
	for _, r := range s.Requests(t) {
		if r.Code == http.StatusForbidden {
			out = append(out, r)
		}
	}
	return out
}

// restMapper maps kinds to resources through the server's discovery,
// refreshed when a kind is not (yet) known.
func (s *Server) restMapper(t testing.TB) meta.ResettableRESTMapper {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mapper == nil {
		dc, err := discovery.NewDiscoveryClientForConfig(s.AdminConfig())
		if err != nil {
			t.Fatal(err)
		}
		s.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	}
	return s.mapper
}

// ApplyYAML creates every object of the YAML documents (each may hold
// several, separated by ---) as the admin, in order. Namespaced objects
// without a namespace go to FleetNamespace. A CustomResourceDefinition is
// waited for until it is established and served. It returns the created
// objects as the server answered.
func (s *Server) ApplyYAML(t testing.TB, docs ...string) []*unstructured.Unstructured {
	t.Helper()
	dyn, err := dynamic.NewForConfig(s.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range docs {
		r := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := r.Decode(&obj.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("kubeapi: ApplyYAML: %v", err)
			}
			if len(obj.Object) == 0 {
				continue
			}
			created := s.create(t, dyn, obj)
			out = append(out, created)
			if created.GetKind() == "CustomResourceDefinition" {
				s.waitCRD(t, dyn, created)
			}
		}
	}
	return out
}

func (s *Server) create(t testing.TB, dyn dynamic.Interface, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	gvk := obj.GroupVersionKind()
	mapper := s.restMapper(t)
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		mapper.Reset()
		if m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			t.Fatalf("kubeapi: %s: %v", gvk, err)
		}
	}
	var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			obj.SetNamespace(FleetNamespace)
		}
		ri = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	created, err := ri.Create(ctx, obj, metav1.CreateOptions{FieldValidation: "Strict"})
	if err != nil {
		t.Fatalf("kubeapi: create %s %s/%s: %v", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return created
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// waitCRD waits until the CRD is Established and its kind maps to a resource.
func (s *Server) waitCRD(t testing.TB, dyn dynamic.Interface, crd *unstructured.Unstructured) {
	t.Helper()
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	testutil.Eventually(t, 30*time.Second, "CRD "+crd.GetName()+" established", func() bool {
		got, err := dyn.Resource(crdResource).Get(context.Background(), crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return false
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if c, ok := c.(map[string]any); ok && c["type"] == "Established" && c["status"] == "True" {
				mapper := s.restMapper(t)
				mapper.Reset()
				_, err := mapper.RESTMapping(schema.GroupKind{Group: group, Kind: kind})
				return err == nil
			}
		}
		return false
	})
}

// PodState is what SetPodStatus writes.
type PodState struct {
	Phase corev1.PodPhase
	Ready bool
	// IP is the pod IP; none when empty.
	IP string
}

// SetPodStatus sets a pod's phase, Ready condition and IP through the status
// subresource, as the kubelet would.
func (s *Server) SetPodStatus(t testing.TB, namespace, name string, st PodState) *corev1.Pod {
	t.Helper()
	cond := corev1.ConditionFalse
	if st.Ready {
		cond = corev1.ConditionTrue
	}
	now := metav1.Now()
	status := corev1.PodStatus{
		Phase: st.Phase,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: cond, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: now},
		},
	}
	if st.IP != "" {
		status.PodIP, status.PodIPs = st.IP, []corev1.PodIP{{IP: st.IP}}
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pod, err := s.Clientset(t).CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatalf("kubeapi: patch status of pod %s/%s: %v", namespace, name, err)
	}
	return pod
}

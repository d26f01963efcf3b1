// Package deploy checks the Kubernetes manifests under scripts/deploy: the
// Helm chart rendered with every combination of its discovery switches and
// the Kustomize base and overlays, each parsed strictly into the Kubernetes
// API types, with the RBAC rules held to the minimal sets the discovery
// sources need and the router's configuration run through the router's own
// validation.
//
// Rendering needs helm and kustomize: the pinned builds the Makefile names in
// $CONTINUUM_HELM and $CONTINUUM_KUSTOMIZE (`make tools` and `make
// deploy-check` build them), else the ones on PATH. Without them the
// rendering tests skip with a logged reason and only the static files are
// checked; in CI, or under `make deploy-check`, they fail instead.
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/testutil"
)

// The minimal RBAC rules, in order, all get/list/watch: pods for the pods
// source, and DynamoWorkerMetadata resources and EndpointSlices as well when
// the metadata source is enabled.
var (
	podRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
	}
	metadataRules = append(slices.Clone(podRules), brokerRules...)
	// brokerRules are the event broker's: its source (kubernetes) reads
	// DynamoWorkerMetadata resources and EndpointSlices only.
	brokerRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"nvidia.com"}, Resources: []string{"dynamoworkermetadatas"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
	}
)

// allowedKinds is every kind the manifests may hold, with its apiVersion.
var allowedKinds = map[string]string{
	"ServiceAccount":      "v1",
	"ConfigMap":           "v1",
	"Service":             "v1",
	"Deployment":          "apps/v1",
	"Role":                "rbac.authorization.k8s.io/v1",
	"RoleBinding":         "rbac.authorization.k8s.io/v1",
	"NetworkPolicy":       "networking.k8s.io/v1",
	"Secret":              "v1",
	"PodDisruptionBudget": "policy/v1",
}

// strict decodes manifests into the Kubernetes API types, refusing unknown
// and duplicate fields.
var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// manifests is one rendering, by kind.
type manifests struct {
	all            []runtime.Object
	serviceAccount []*corev1.ServiceAccount
	configMaps     []*corev1.ConfigMap
	services       []*corev1.Service
	deployments    []*appsv1.Deployment
	roles          []*rbacv1.Role
	roleBindings   []*rbacv1.RoleBinding
	netpols        []*networkingv1.NetworkPolicy
	secrets        []*corev1.Secret
	pdbs           []*policyv1.PodDisruptionBudget
}

// parse splits a multi-document YAML stream and decodes every document
// strictly; kinds and apiVersions must be in allowedKinds.
func parse(t *testing.T, name string, data []byte) *manifests {
	t.Helper()
	m := &manifests{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", name, i, err)
		}
		if isBlank(doc) {
			continue
		}
		obj, gvk, err := strict.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: document %d: %v\n%s", name, i, err, doc)
		}
		if want, ok := allowedKinds[gvk.Kind]; !ok {
			t.Errorf("%s: document %d: unexpected kind %s", name, i, gvk.Kind)
		} else if got := gvk.GroupVersion().String(); got != want {
			t.Errorf("%s: %s has apiVersion %s, want %s", name, gvk.Kind, got, want)
		}
		m.all = append(m.all, obj)
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			m.serviceAccount = append(m.serviceAccount, o)
		case *corev1.ConfigMap:
			m.configMaps = append(m.configMaps, o)
		case *corev1.Service:
			m.services = append(m.services, o)
		case *appsv1.Deployment:
			m.deployments = append(m.deployments, o)
		case *rbacv1.Role:
			m.roles = append(m.roles, o)
		case *rbacv1.RoleBinding:
			m.roleBindings = append(m.roleBindings, o)
		case *networkingv1.NetworkPolicy:
			m.netpols = append(m.netpols, o)
		case *corev1.Secret:
			m.secrets = append(m.secrets, o)
		case *policyv1.PodDisruptionBudget:
			m.pdbs = append(m.pdbs, o)
		}
	}
	return m
}

// isBlank reports whether a YAML document holds only comments and space.
func isBlank(doc []byte) bool {
	for line := range strings.SplitSeq(string(doc), "\n") {
		if s := strings.TrimSpace(line); s != "" && s != "---" && !strings.HasPrefix(s, "#") {
			return false
		}
	}
	return true
}

// want describes what a rendering must hold.
type want struct {
	discovery bool   // Role, RoleBinding, token mount
	metadata  bool   // source kubernetes and the metadata rules
	routerNS  string // the namespace of the router's objects ("" when unset)
	fleetNS   string // the Role's namespace and kubernetes.namespace
	apiPorts  []int  // the NetworkPolicy's API server ports; none: no policy
	adminTok  bool   // admin.token from CONTINUUM_ADMIN_TOKEN
}

// check holds a rendering to w.
func check(t *testing.T, name string, m *manifests, w want) {
	t.Helper()
	if len(m.deployments) != 1 || len(m.configMaps) != 1 || len(m.services) != 1 || len(m.serviceAccount) != 1 {
		t.Fatalf("%s: want one Deployment, ConfigMap, Service and ServiceAccount; got %d, %d, %d, %d",
			name, len(m.deployments), len(m.configMaps), len(m.services), len(m.serviceAccount))
	}
	d, cm, sa := m.deployments[0], m.configMaps[0], m.serviceAccount[0]
	for _, o := range []interface{ GetNamespace() string }{d, cm, sa, m.services[0]} {
		if o.GetNamespace() != w.routerNS {
			t.Errorf("%s: %T in namespace %q, want %q", name, o, o.GetNamespace(), w.routerNS)
		}
	}
	spec := d.Spec.Template.Spec
	if spec.ServiceAccountName != sa.Name {
		t.Errorf("%s: Deployment runs as %q, the ServiceAccount is %q", name, spec.ServiceAccountName, sa.Name)
	}
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("%s: the ServiceAccount must not mount its token by default", name)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken != w.discovery {
		t.Errorf("%s: pod automountServiceAccountToken = %v, want %v", name, spec.AutomountServiceAccountToken, w.discovery)
	}
	ports := checkContainer(t, name, d)

	// The configuration file, through the router's own validation.
	cfgMount := false
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
			cfgMount = true
		}
	}
	if !cfgMount {
		t.Errorf("%s: no volume mounts ConfigMap %s", name, cm.Name)
	}
	cfg := checkConfig(t, name, cm, w)
	if cfg != nil {
		if p := portOf(t, cfg.Server.BindAddress); p != ports["http"] {
			t.Errorf("%s: server.bind_address %s, container port http %d", name, cfg.Server.BindAddress, ports["http"])
		}
		if p := portOf(t, cfg.Admin.BindAddress); p != ports["admin"] {
			t.Errorf("%s: admin.bind_address %s, container port admin %d", name, cfg.Admin.BindAddress, ports["admin"])
		}
	}

	// RBAC: exactly the minimal rules, bound to the router's ServiceAccount.
	if !w.discovery {
		if len(m.roles)+len(m.roleBindings)+len(m.netpols) != 0 {
			t.Errorf("%s: discovery is off, yet %d Roles, %d RoleBindings, %d NetworkPolicies", name, len(m.roles), len(m.roleBindings), len(m.netpols))
		}
		return
	}
	if len(m.roles) != 1 || len(m.roleBindings) != 1 {
		t.Fatalf("%s: want one Role and one RoleBinding, got %d and %d", name, len(m.roles), len(m.roleBindings))
	}
	role, rb := m.roles[0], m.roleBindings[0]
	rules := podRules
	if w.metadata {
		rules = metadataRules
	}
	if !rulesEqual(role.Rules, rules) {
		t.Errorf("%s: Role rules\n%s\nwant exactly\n%s", name, fmtRules(role.Rules), fmtRules(rules))
	}
	if role.Namespace != w.fleetNS || rb.Namespace != w.fleetNS {
		t.Errorf("%s: Role in %q and RoleBinding in %q, want the fleet namespace %q", name, role.Namespace, rb.Namespace, w.fleetNS)
	}
	if rb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}) {
		t.Errorf("%s: RoleBinding refers to %+v, want Role %s", name, rb.RoleRef, role.Name)
	}
	wantSubject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: cmp(sa.Namespace, w.fleetNS)}
	if len(rb.Subjects) != 1 || rb.Subjects[0] != wantSubject {
		t.Errorf("%s: RoleBinding subjects %+v, want only %+v", name, rb.Subjects, wantSubject)
	}
	if cfg != nil && cfg.Dynamo.Discovery.Kubernetes.Namespace != w.fleetNS {
		t.Errorf("%s: kubernetes.namespace %q, Role in %q", name, cfg.Dynamo.Discovery.Kubernetes.Namespace, w.fleetNS)
	}
	checkNetworkPolicy(t, name, m, d, w)
}

// cmp is a when set, else b: a ServiceAccount without a namespace (a
// Kustomize base) takes the overlay's.
func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// checkContainer checks the router container's probes and security settings
// and returns its named ports.
func checkContainer(t *testing.T, name string, d *appsv1.Deployment) map[string]int {
	t.Helper()
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: want one container, got %d", name, len(spec.Containers))
	}
	c := spec.Containers[0]
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = int(p.ContainerPort)
	}
	if ports["http"] == 0 || ports["admin"] == 0 {
		t.Errorf("%s: container ports %v, want http and admin", name, ports)
	}
	// Liveness on the admin listener, which server.max_connections does
	// not count (a router busy with clients is alive); readiness where
	// the clients come.
	for _, p := range []struct {
		what       string
		probe      *corev1.Probe
		path, port string
	}{{"liveness", c.LivenessProbe, "/health", "admin"}, {"readiness", c.ReadinessProbe, "/ready", "http"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", name, p.what)
			continue
		}
		if p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != p.port {
			t.Errorf("%s: %s probe GET %s on %s, want %s on %s", name, p.what, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.String(), p.path, p.port)
		}
	}
	// The artifact cache on a writable volume (the root filesystem is
	// read-only).
	cacheHome := ""
	for _, e := range c.Env {
		if e.Name == "XDG_CACHE_HOME" {
			cacheHome = e.Value
		}
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (cacheHome != "" && m.MountPath == cacheHome && !m.ReadOnly)
	}
	if !mounted {
		t.Errorf("%s: XDG_CACHE_HOME %q is not a writable mount: the artifact cache would land on the read-only root filesystem", name, cacheHome)
	}
	sc := c.SecurityContext
	psc := spec.SecurityContext
	switch {
	case sc == nil || psc == nil:
		t.Errorf("%s: container and pod security contexts are required", name)
	case !isTrue(sc.RunAsNonRoot) || !isTrue(psc.RunAsNonRoot):
		t.Errorf("%s: runAsNonRoot must be set", name)
	case psc.RunAsUser == nil || *psc.RunAsUser == 0:
		t.Errorf("%s: runAsUser must be a non-root uid", name)
	case !isTrue(sc.ReadOnlyRootFilesystem):
		t.Errorf("%s: readOnlyRootFilesystem must be true", name)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("%s: allowPrivilegeEscalation must be false", name)
	case sc.Privileged != nil && *sc.Privileged:
		t.Errorf("%s: the container must not be privileged", name)
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0:
		t.Errorf("%s: capabilities must drop ALL and add none", name)
	case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("%s: seccompProfile must be RuntimeDefault", name)
	}
	if !slices.Contains(c.Args, "serve") || !slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--config=") }) {
		t.Errorf("%s: container args %q, want serve --config=...", name, c.Args)
	}
	return ports
}

func isTrue(b *bool) bool { return b != nil && *b }

// checkConfig runs the ConfigMap's continuum.yaml through config.Parse: no
// errors, and the discovery source the switches select.
func checkConfig(t *testing.T, name string, cm *corev1.ConfigMap, w want) *config.Config {
	t.Helper()
	data, ok := cm.Data["continuum.yaml"]
	if !ok || len(cm.Data) != 1 {
		t.Errorf("%s: ConfigMap %s holds %d keys, want continuum.yaml alone", name, cm.Name, len(cm.Data))
		return nil
	}
	env := func(n string) (string, bool) {
		if n == "CONTINUUM_ADMIN_TOKEN" {
			return "test-admin-token", true
		}
		return "", false
	}
	doc, err := config.Parse(name+":continuum.yaml", []byte(data), config.Options{Env: env})
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return nil
	}
	for _, f := range doc.Findings {
		if f.Severity == config.SeverityError {
			t.Errorf("%s: %s", name, f)
		} else {
			t.Logf("%s: %s", name, f)
		}
	}
	c := doc.Config
	source := ""
	switch {
	case w.discovery && w.metadata:
		source = config.SourceKubernetes
	case w.discovery:
		source = config.SourceKubernetesPods
	}
	if got := c.Dynamo.Discovery.Source; c.Dynamo.Enabled != w.discovery || (w.discovery && got != source) {
		t.Errorf("%s: dynamo.enabled %v with source %q, want %v and %q", name, c.Dynamo.Enabled, got, w.discovery, source)
	}
	if (c.Admin.Token != "") != w.adminTok {
		t.Errorf("%s: admin token set = %v, want %v", name, c.Admin.Token != "", w.adminTok)
	}
	return c
}

func portOf(t *testing.T, hostport string) int {
	i := strings.LastIndexByte(hostport, ':')
	p, err := strconv.Atoi(hostport[i+1:])
	if err != nil {
		t.Errorf("bind address %q: %v", hostport, err)
	}
	return p
}

// checkNetworkPolicy: present exactly when there are API server ports; it
// selects the router's pods, restricts egress only, and allows the API server
// ports, DNS and the fleet's namespace.
func checkNetworkPolicy(t *testing.T, name string, m *manifests, d *appsv1.Deployment, w want) {
	t.Helper()
	if len(w.apiPorts) == 0 {
		if len(m.netpols) != 0 {
			t.Errorf("%s: no API server ports, yet %d NetworkPolicies", name, len(m.netpols))
		}
		return
	}
	if len(m.netpols) != 1 {
		t.Fatalf("%s: want one NetworkPolicy, got %d", name, len(m.netpols))
	}
	np := m.netpols[0]
	if np.Namespace != w.routerNS {
		t.Errorf("%s: NetworkPolicy in %q, the router in %q", name, np.Namespace, w.routerNS)
	}
	for k, v := range np.Spec.PodSelector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("%s: NetworkPolicy selects %s=%s, not a label of the router's pods", name, k, v)
		}
	}
	if len(np.Spec.PodSelector.MatchLabels) == 0 {
		t.Errorf("%s: NetworkPolicy selects every pod of the namespace", name)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) {
		t.Errorf("%s: policyTypes %v, want [Egress]", name, np.Spec.PolicyTypes)
	}
	var apiPorts []int
	dns, fleet := false, false
	for _, r := range np.Spec.Egress {
		switch {
		case len(r.To) == 1 && r.To[0].NamespaceSelector != nil && len(r.Ports) == 0:
			fleet = r.To[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == w.fleetNS
		case len(r.To) == 0 && len(r.Ports) > 0 && r.Ports[0].Port.IntValue() == 53:
			dns = true
		case len(r.To) == 0:
			for _, p := range r.Ports {
				if p.Protocol == nil || *p.Protocol != corev1.ProtocolTCP {
					t.Errorf("%s: API server port %v is not TCP", name, p.Port)
				}
				apiPorts = append(apiPorts, p.Port.IntValue())
			}
		}
	}
	if !slices.Equal(apiPorts, w.apiPorts) || !dns || !fleet {
		t.Errorf("%s: egress allows API server ports %v (want %v), DNS %v, fleet namespace %q %v", name, apiPorts, w.apiPorts, dns, w.fleetNS, fleet)
	}
}

func rulesEqual(a, b []rbacv1.PolicyRule) bool {
	return slices.EqualFunc(a, b, func(x, y rbacv1.PolicyRule) bool {
		return slices.Equal(x.APIGroups, y.APIGroups) && slices.Equal(x.Resources, y.Resources) &&
			slices.Equal(x.Verbs, y.Verbs) && len(x.ResourceNames)+len(y.ResourceNames)+len(x.NonResourceURLs)+len(y.NonResourceURLs) == 0
	})
}

func fmtRules(rs []rbacv1.PolicyRule) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "  groups %q resources %q verbs %q names %q urls %q\n", r.APIGroups, r.Resources, r.Verbs, r.ResourceNames, r.NonResourceURLs)
	}
	return b.String()
}

// tool finds a rendering tool: the file $CONTINUUM_<NAME> names (the pinned
// build), else name on PATH. Without either it skips, or fails in CI or with
// CONTINUUM_REQUIRE_DEPLOY_TOOLS=1 (make deploy-check).
func tool(t *testing.T, name string) string {
	t.Helper()
	env := "CONTINUUM_" + strings.ToUpper(name)
	pinned := os.Getenv(env)
	if pinned != "" {
		if _, err := os.Stat(pinned); err == nil {
			return pinned
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	why := fmt.Sprintf("%s is not on PATH and %s is unset", name, env)
	if pinned != "" {
		why = fmt.Sprintf("%s is not on PATH and %s=%s does not exist", name, env, pinned)
	}
	why += ": rendering not checked (make tools builds the pinned " + name + ")"
	if os.Getenv("CONTINUUM_REQUIRE_DEPLOY_TOOLS") == "1" {
		t.Fatal(why)
	}
	testutil.SkipOrFailInCI(t, "%s", why)
	return ""
}

func run(t *testing.T, bin string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

func deployDir(t *testing.T, elem ...string) string {
	return filepath.Join(append([]string{testutil.RepoRoot(t), "scripts", "deploy"}, elem...)...)
}

func TestHelmChart(t *testing.T) {
	helm := tool(t, "helm")
	chart := deployDir(t, "helm", "continuum")
	if out, err := run(t, helm, "lint", "--strict", chart, "--set", "dynamoPodDiscovery.enabled=true", "--set", "dynamoPodDiscovery.model=m"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, enabled := range []bool{false, true} {
		for _, metadata := range []bool{false, true} {
			for _, fleetNS := range []string{"", "fleet"} {
				for _, ports := range [][]int{nil, {443, 6443}, {6443}, {}} {
					name := fmt.Sprintf("helm enabled=%v metadata=%v namespace=%q apiServerPorts=%v", enabled, metadata, fleetNS, ports)
					args := []string{"template", "continuum", chart, "--namespace", "routers",
						"--set", fmt.Sprintf("dynamoPodDiscovery.enabled=%v", enabled),
						"--set", fmt.Sprintf("dynamoPodDiscovery.metadata=%v", metadata),
						"--set", "dynamoPodDiscovery.namespace=" + fleetNS,
						"--set", "dynamoPodDiscovery.model=served-model",
					}
					w := want{discovery: enabled, metadata: metadata, routerNS: "routers", fleetNS: cmp(fleetNS, "routers"), apiPorts: ports}
					if ports == nil {
						w.apiPorts = []int{443, 6443} // the chart's default
					} else {
						js := strings.ReplaceAll(fmt.Sprint(ports), " ", ",")
						args = append(args, "--set-json", "dynamoPodDiscovery.apiServerPorts="+js)
					}
					if !enabled {
						w.apiPorts = nil
					}
					out, err := run(t, helm, args...)
					if err != nil {
						t.Fatal(err)
					}
					check(t, name, parse(t, name, out), w)
				}
			}
		}
	}
}

func TestHelmChartOptions(t *testing.T) {
	helm := tool(t, "helm")
	chart := deployDir(t, "helm", "continuum")
	base := []string{"template", "continuum", chart, "--namespace", "routers", "--set", "dynamoPodDiscovery.enabled=true"}

	// The admin token from a Secret, per-component models, several Dynamo namespaces.
	out, err := run(t, helm, append(base,
		"--set", "admin.tokenSecret.name=continuum-admin",
		"--set-json", `dynamoPodDiscovery.dynamoNamespaces=["ns-a","ns-b"]`,
		"--set-json", `dynamoPodDiscovery.models=[{"component":"VllmWorker-a","model":"m-a","dynamo_namespace":"ns-a"},{"component":"VllmWorker-b","model":"m-b","dynamo_namespace":"ns-b"}]`,
		"--set", "dynamoPodDiscovery.routerConfig.dynamo.shim.backends=null", // pools replace backends
		"--set-json", `dynamoPodDiscovery.routerConfig.dynamo.shim={"pools":[{"namespace":"ns-a","backends":["dynamo-frontend"]},{"namespace":"ns-b","backends":["frontend-b"]}]}`,
		"--set-json", `config.backends=[{"name":"dynamo-frontend","url":"http://a:8000"},{"name":"frontend-b","url":"http://b:8000"}]`,
	)...)
	if err != nil {
		t.Fatal(err)
	}
	m := parse(t, "options", out)
	check(t, "options", m, want{discovery: true, routerNS: "routers", fleetNS: "routers", apiPorts: []int{443, 6443}, adminTok: true})
	env := m.deployments[0].Spec.Template.Spec.Containers[0].Env
	i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == "CONTINUUM_ADMIN_TOKEN" })
	if i < 0 || env[i].ValueFrom == nil || env[i].ValueFrom.SecretKeyRef == nil || env[i].ValueFrom.SecretKeyRef.Name != "continuum-admin" {
		t.Errorf("the admin token comes from Secret continuum-admin: env %+v", env)
	}

	// Keys written in config win over routerConfig's; a backend key comes
	// in as a variable from a Secret (extraEnv).
	out, err = run(t, helm, append(base,
		"--set", "dynamoPodDiscovery.model=m",
		"--set-json", `config.dynamo={"load":{"direct_allow_cidrs":["172.16.0.0/12"]}}`,
		"--set", "config.disaggregated_serving.enabled=false",
		"--set-json", `config.backends=[{"name":"dynamo-frontend","url":"http://a:8000","api_key":"${OPENAI_API_KEY}"}]`,
		"--set-json", `extraEnv=[{"name":"OPENAI_API_KEY","valueFrom":{"secretKeyRef":{"name":"openai","key":"api-key"}}}]`,
	)...)
	if err != nil {
		t.Fatal(err)
	}
	m = parse(t, "explicit config", out)
	if len(m.configMaps) != 1 {
		t.Fatalf("explicit config: %d ConfigMaps", len(m.configMaps))
	}
	cfg := m.configMaps[0].Data["continuum.yaml"]
	for _, want := range []string{"172.16.0.0/12", "enabled: false"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("explicit config: %q not rendered (routerConfig overwrote it):\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, "10.0.0.0/8") {
		t.Errorf("explicit config: routerConfig's allow-list replaced the operator's:\n%s", cfg)
	}
	env = m.deployments[0].Spec.Template.Spec.Containers[0].Env
	if !slices.ContainsFunc(env, func(e corev1.EnvVar) bool {
		return e.Name == "OPENAI_API_KEY" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
	}) {
		t.Errorf("extraEnv not rendered: %+v", env)
	}

	// A PodDisruptionBudget on request, over the router's pods.
	out, err = run(t, helm, append(base, "--set", "dynamoPodDiscovery.model=m", "--set", "replicaCount=3",
		"--set", "podDisruptionBudget.enabled=true", "--set", "podDisruptionBudget.minAvailable=2", "--set", "podDisruptionBudget.maxUnavailable=null")...)
	if err != nil {
		t.Fatal(err)
	}
	m = parse(t, "pdb", out)
	if len(m.pdbs) != 1 {
		t.Fatalf("pdb: %d PodDisruptionBudgets, want 1", len(m.pdbs))
	}
	pdb, pods := m.pdbs[0], m.deployments[0].Spec.Template.Labels
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 2 || pdb.Spec.MaxUnavailable != nil || pdb.Namespace != "routers" {
		t.Errorf("pdb: %+v, want minAvailable 2 alone in namespace routers", pdb.Spec)
	}
	if sel := pdb.Spec.Selector; sel == nil || len(sel.MatchLabels) == 0 || !labels.SelectorFromSet(sel.MatchLabels).Matches(labels.Set(pods)) {
		t.Errorf("pdb: selector %v does not select the router's pods %v", pdb.Spec.Selector, pods)
	}
	if out, err = run(t, helm, append(base, "--set", "dynamoPodDiscovery.model=m")...); err != nil {
		t.Fatal(err)
	} else if m = parse(t, "no pdb", out); len(m.pdbs) != 0 {
		t.Errorf("no pdb: a PodDisruptionBudget rendered by default")
	}

	// Rendering refuses what the router would refuse, with the reason.
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{nil, "dynamoPodDiscovery.model (or models) is required"},
		{[]string{"--set", "dynamoPodDiscovery.model=m", "--set-json", `dynamoPodDiscovery.models=[{"component":"c","model":"m"}]`}, "model and dynamoPodDiscovery.models are exclusive"},
		{[]string{"--set", "dynamoPodDiscovery.model=m", "--set", "dynamoPodDiscovery.dynamoNamespace="}, "dynamoPodDiscovery.dynamoNamespace (or dynamoNamespaces) is required"},
		{[]string{"--set", "dynamoPodDiscovery.model=m", "--set", "podDisruptionBudget.enabled=true", "--set", "podDisruptionBudget.minAvailable=1"}, "set minAvailable or maxUnavailable, not both"},
		{[]string{"--set", "dynamoPodDiscovery.model=m", "--set", "podDisruptionBudget.enabled=true", "--set", "podDisruptionBudget.maxUnavailable=null"}, "minAvailable or maxUnavailable is required"},
	} {
		_, err := run(t, helm, append(slices.Clone(base), tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: err %v, want %q", tc.args, err, tc.msg)
		}
	}
}

func TestKustomize(t *testing.T) {
	kustomize := tool(t, "kustomize")
	for _, tc := range []struct {
		dir string
		w   want
	}{
		{"base", want{}},
		{"overlays/dynamo-pod-discovery", want{discovery: true, routerNS: "dynamo", fleetNS: "dynamo", apiPorts: []int{443, 6443}}},
		{"overlays/dynamo-metadata-discovery", want{discovery: true, metadata: true, routerNS: "dynamo", fleetNS: "dynamo", apiPorts: []int{443, 6443}}},
	} {
		out, err := run(t, kustomize, "build", deployDir(t, "kustomize", tc.dir))
		if err != nil {
			t.Fatal(err)
		}
		check(t, "kustomize "+tc.dir, parse(t, tc.dir, out), tc.w)
	}
}

// TestStaticManifests needs no tools: every plain manifest under the
// Kustomize tree parses strictly, the Roles are exactly the minimal sets, and
// every router configuration file validates.
func TestStaticManifests(t *testing.T) {
	root := deployDir(t, "kustomize")
	roles := map[string][]rbacv1.PolicyRule{
		"overlays/dynamo-pod-discovery/role.yaml":      podRules,
		"overlays/dynamo-metadata-discovery/role.yaml": metadataRules,
		"event-broker/role.yaml":                       brokerRules,
	}
	seen, configs := 0, 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		switch filepath.Base(path) {
		case "kustomization.yaml":
			return nil
		case "continuum.yaml":
			configs++
			doc, err := config.Parse(rel, data, config.Options{Env: func(string) (string, bool) { return "", false }})
			if err != nil {
				t.Errorf("%s: %v", rel, err)
			} else if n := doc.Findings.Errors(); n > 0 {
				t.Errorf("%s: %d errors: %v", rel, n, doc.Findings)
			}
			return nil
		}
		m := parse(t, rel, data)
		if want, ok := roles[filepath.ToSlash(rel)]; ok {
			seen++
			if len(m.roles) != 1 || !rulesEqual(m.roles[0].Rules, want) {
				t.Errorf("%s: want one Role with exactly\n%s", rel, fmtRules(want))
			}
		} else if len(m.roles) > 0 {
			t.Errorf("%s: a Role outside the known files", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != len(roles) || configs != 3 {
		t.Errorf("found %d of %d Roles and %d of 3 configuration files", seen, len(roles), configs)
	}

	// The chart's values hold the discovery switches with their defaults
	// (both off, namespace empty, API server ports 443 and 6443), and its
	// templates hold the same rules.
	values, err := os.ReadFile(deployDir(t, "helm", "continuum", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		DynamoPodDiscovery struct {
			Enabled        *bool  `yaml:"enabled"`
			Metadata       *bool  `yaml:"metadata"`
			Namespace      string `yaml:"namespace"`
			APIServerPorts []int  `yaml:"apiServerPorts"`
		} `yaml:"dynamoPodDiscovery"`
	}
	if err := yaml.Unmarshal(values, &v); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	d := v.DynamoPodDiscovery
	if d.Enabled == nil || *d.Enabled || d.Metadata == nil || *d.Metadata || d.Namespace != "" || !slices.Equal(d.APIServerPorts, []int{443, 6443}) {
		t.Errorf("values.yaml dynamoPodDiscovery: enabled %v metadata %v namespace %q apiServerPorts %v; want false, false, \"\", [443 6443]",
			d.Enabled, d.Metadata, d.Namespace, d.APIServerPorts)
	}
	tpl, err := os.ReadFile(deployDir(t, "helm", "continuum", "templates", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range metadataRules {
		line := fmt.Sprintf(`resources: ["%s"]`, r.Resources[0])
		if !bytes.Contains(tpl, []byte(line)) {
			t.Errorf("helm role.yaml lacks %s", line)
		}
	}
	if n := bytes.Count(tpl, []byte(`verbs: ["get", "list", "watch"]`)); n != len(metadataRules) {
		t.Errorf("helm role.yaml has %d get/list/watch rules, want %d", n, len(metadataRules))
	}
}

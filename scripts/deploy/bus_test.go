package deploy

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// busClient describes what the rendering of an event bus client (the
// broker, the kv-listener) must hold.
type busClient struct {
	command   string   // broker, kv-listener
	namespace string   // of every object
	args      []string // that the container's args hold
	apiAccess bool     // its token mounted, a Role of exactly brokerRules bound to it
	secret    bool     // a Secret holding the token
	// egress is the NetworkPolicy's ports, rule by rule: API server, DNS,
	// the router, the sources.
	egress [][]int
	// sourceNamespace, when set, is the namespace the last egress rule is
	// limited to.
	sourceNamespace string
}

// checkBusClient holds a client's rendering to w.
func checkBusClient(t *testing.T, name string, m *manifests, w busClient) {
	t.Helper()
	if len(m.deployments) != 1 || len(m.serviceAccount) != 1 || len(m.netpols) != 1 || len(m.configMaps)+len(m.services) != 0 {
		t.Fatalf("%s: want one Deployment, ServiceAccount and NetworkPolicy, and no ConfigMap or Service; got %d, %d, %d, %d, %d",
			name, len(m.deployments), len(m.serviceAccount), len(m.netpols), len(m.configMaps), len(m.services))
	}
	d, sa, np := m.deployments[0], m.serviceAccount[0], m.netpols[0]
	for _, o := range m.all {
		if ns := o.(interface{ GetNamespace() string }).GetNamespace(); ns != w.namespace {
			t.Errorf("%s: %T in namespace %q, want %q", name, o, ns, w.namespace)
		}
	}
	// One process per credential, never two at once (a second replica or a
	// rollout's surge pod would replace the first's session).
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("%s: replicas %v, strategy %q: want 1 and Recreate", name, d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	spec := d.Spec.Template.Spec
	if spec.ServiceAccountName != sa.Name || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("%s: the Deployment runs as %q (ServiceAccount %q, which must not mount its token by default)", name, spec.ServiceAccountName, sa.Name)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken != w.apiAccess {
		t.Errorf("%s: pod automountServiceAccountToken = %v, want %v", name, spec.AutomountServiceAccountToken, w.apiAccess)
	}
	c := checkClientContainer(t, name, d, w)
	if !slices.Contains(c.Args, "--log-format=json") {
		t.Errorf("%s: args %q", name, c.Args)
	}

	// The token: a Secret volume, mounted where --token-file reads it.
	tokenFile := ""
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--token-file="); ok {
			tokenFile = v
		}
	}
	mounted := false
	for _, vm := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && v.Secret != nil && strings.HasPrefix(tokenFile, vm.MountPath+"/") && vm.ReadOnly {
				mounted = true
				if w.secret {
					found := false
					for _, s := range m.secrets {
						_, has := s.StringData[strings.TrimPrefix(tokenFile, vm.MountPath+"/")]
						found = found || s.Name == v.Secret.SecretName && has
					}
					if !found {
						t.Errorf("%s: no Secret %s holding the token", name, v.Secret.SecretName)
					}
				}
			}
		}
	}
	if !mounted {
		t.Errorf("%s: --token-file %q is not in a read-only Secret volume", name, tokenFile)
	}
	if !w.secret && len(m.secrets) != 0 {
		t.Errorf("%s: %d Secrets rendered for an existing one", name, len(m.secrets))
	}

	// RBAC.
	if !w.apiAccess {
		if len(m.roles)+len(m.roleBindings) != 0 {
			t.Errorf("%s: %d Roles and %d RoleBindings for a client without API access", name, len(m.roles), len(m.roleBindings))
		}
	} else if len(m.roles) != 1 || len(m.roleBindings) != 1 || !rulesEqual(m.roles[0].Rules, brokerRules) {
		t.Errorf("%s: want one Role of exactly\n%s", name, fmtRules(brokerRules))
	} else if rb := m.roleBindings[0]; rb.RoleRef.Name != m.roles[0].Name || len(rb.Subjects) != 1 || rb.Subjects[0].Name != sa.Name || rb.Subjects[0].Namespace != w.namespace {
		t.Errorf("%s: RoleBinding %+v does not bind the Role to ServiceAccount %s", name, rb, sa.Name)
	}

	// Egress only, of the client's pods only, to exactly the ports.
	if !labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) || len(np.Spec.PodSelector.MatchLabels) == 0 {
		t.Errorf("%s: the NetworkPolicy does not select the client's pods", name)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) {
		t.Errorf("%s: policyTypes %v", name, np.Spec.PolicyTypes)
	}
	var got [][]int
	for _, r := range np.Spec.Egress {
		var ports []int
		for _, p := range r.Ports {
			if p.Port.IntValue() == 53 {
				ports = append(ports, 53)
				continue
			}
			if p.Protocol == nil || *p.Protocol != corev1.ProtocolTCP {
				t.Errorf("%s: port %v is not TCP", name, p.Port)
			}
			ports = append(ports, p.Port.IntValue())
			if p.EndPort != nil {
				ports = append(ports, int(*p.EndPort))
			}
		}
		got = append(got, slices.Compact(ports))
	}
	if !slices.EqualFunc(got, w.egress, slices.Equal[[]int]) {
		t.Errorf("%s: egress ports %v, want %v", name, got, w.egress)
	}
	if w.sourceNamespace != "" {
		last := np.Spec.Egress[len(np.Spec.Egress)-1]
		if len(last.To) != 1 || last.To[0].NamespaceSelector == nil || last.To[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != w.sourceNamespace {
			t.Errorf("%s: the publisher ports are not limited to namespace %s: %+v", name, w.sourceNamespace, last.To)
		}
	}
}

// checkClientContainer checks the client's container: its command and
// args, the metrics port and its probes, and the security settings the
// router's container has.
func checkClientContainer(t *testing.T, name string, d *appsv1.Deployment, w busClient) corev1.Container {
	t.Helper()
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: want one container, got %d", name, len(spec.Containers))
	}
	c := spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != w.command {
		t.Errorf("%s: args %q, want %s first", name, c.Args, w.command)
	}
	for _, a := range w.args {
		if !slices.Contains(c.Args, a) {
			t.Errorf("%s: args %q lack %s", name, c.Args, a)
		}
	}
	metrics := 0
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			metrics = int(p.ContainerPort)
		}
	}
	if metrics == 0 || !slices.Contains(c.Args, "--metrics-address=0.0.0.0:"+strconv.Itoa(metrics)) {
		t.Errorf("%s: metrics port %d, args %q", name, metrics, c.Args)
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s: probes must GET /healthz on the metrics port", name)
		}
	}
	sc, psc := c.SecurityContext, spec.SecurityContext
	if sc == nil || psc == nil || !isTrue(sc.RunAsNonRoot) || !isTrue(sc.ReadOnlyRootFilesystem) || sc.AllowPrivilegeEscalation == nil ||
		*sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		psc.RunAsUser == nil || *psc.RunAsUser == 0 || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: the container must run as non-root, read-only, without privileges or capabilities, under RuntimeDefault seccomp", name)
	}
	return c
}

// partition splits a rendering's objects by the name prefix that owns
// them (the longest that matches); "" takes the rest.
func partition(m *manifests, prefixes ...string) map[string]*manifests {
	out := map[string]*manifests{"": {}}
	for _, p := range prefixes {
		out[p] = &manifests{}
	}
	for _, o := range m.all {
		name := o.(interface{ GetName() string }).GetName()
		owner := ""
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) && len(p) > len(owner) {
				owner = p
			}
		}
		d := out[owner]
		d.all = append(d.all, o)
		switch o := o.(type) {
		case *corev1.ServiceAccount:
			d.serviceAccount = append(d.serviceAccount, o)
		case *corev1.ConfigMap:
			d.configMaps = append(d.configMaps, o)
		case *corev1.Service:
			d.services = append(d.services, o)
		case *corev1.Secret:
			d.secrets = append(d.secrets, o)
		case *appsv1.Deployment:
			d.deployments = append(d.deployments, o)
		case *rbacv1.Role:
			d.roles = append(d.roles, o)
		case *rbacv1.RoleBinding:
			d.roleBindings = append(d.roleBindings, o)
		case *networkingv1.NetworkPolicy:
			d.netpols = append(d.netpols, o)
		}
	}
	return out
}

// disjoint checks that the router's selectors take none of a client's pods.
func disjoint(t *testing.T, name string, router, client *manifests) {
	t.Helper()
	pods := labels.Set(client.deployments[0].Spec.Template.Labels)
	for _, d := range router.deployments {
		if labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(pods) {
			t.Errorf("%s: the router's Deployment selects the client's pods", name)
		}
	}
	for _, s := range router.services {
		if labels.SelectorFromSet(s.Spec.Selector).Matches(pods) {
			t.Errorf("%s: the router's Service selects the client's pods", name)
		}
	}
	for _, np := range router.netpols {
		if labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(pods) {
			t.Errorf("%s: the router's NetworkPolicy selects the client's pods", name)
		}
	}
}

func TestHelmBusClients(t *testing.T) {
	helm := tool(t, "helm")
	chart := deployDir(t, "helm", "continuum")
	base := []string{"template", "c", chart, "--namespace", "routers",
		"--set", "eventBroker.enabled=true", "--set", "eventBroker.router=https://router.example.com:7443", "--set", "eventBroker.id=broker-a.dynamo",
		"--set", "kvListener.enabled=true", "--set", "kvListener.router=https://router.example.com:7444", "--set", "kvListener.id=kv-a",
		"--set-json", `kvListener.backends=[{"name":"vllm-1","url":"http://vllm-1:8080/events"}]`}
	for _, tc := range []struct {
		name     string
		args     []string
		fleet    string
		secret   bool
		ca       bool
		discover bool
	}{
		{name: "tokens in the chart", args: []string{"--set", "eventBroker.token=t1", "--set", "kvListener.token=t2"}, fleet: "routers", secret: true},
		{name: "existing Secrets, a fleet namespace, a CA", fleet: "fleet", ca: true, args: []string{
			"--set", "eventBroker.tokenSecret.name=broker-token", "--set", "kvListener.tokenSecret.name=kv-token",
			"--set", "eventBroker.namespace=fleet", "--set", "eventBroker.caConfigMap=bus-ca", "--set", "kvListener.caConfigMap=bus-ca",
			"--set-json", `eventBroker.dynamoNamespaces=["ns-a","ns-b"]`}},
		{name: "beside a router with discovery", fleet: "routers", secret: true, discover: true, args: []string{
			"--set", "eventBroker.token=t1", "--set", "kvListener.token=t2", "--set", "dynamoPodDiscovery.enabled=true", "--set", "dynamoPodDiscovery.model=m"}},
	} {
		out, err := run(t, helm, append(slices.Clone(base), tc.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		parts := partition(parse(t, tc.name, out), "c-continuum-broker", "c-continuum-kv-listener")
		w := want{routerNS: "routers", discovery: tc.discover, fleetNS: "routers"}
		if tc.discover {
			w.apiPorts = []int{443, 6443}
		}
		check(t, tc.name+" router", parts[""], w)
		brokerArgs := []string{"--router=https://router.example.com:7443", "--id=broker-a.dynamo", "--source=kubernetes", "--kube-namespace=" + tc.fleet}
		if tc.ca {
			brokerArgs = append(brokerArgs, "--ca-file=/etc/continuum/ca/ca.crt", "--dynamo-namespace=ns-a", "--dynamo-namespace=ns-b")
		} else {
			brokerArgs = append(brokerArgs, "--dynamo-namespace=dynamo")
		}
		checkBusClient(t, tc.name+" broker", parts["c-continuum-broker"], busClient{command: "broker", namespace: tc.fleet, args: brokerArgs,
			apiAccess: true, secret: tc.secret, egress: [][]int{{443, 6443}, {53}, {7443}, {1024, 65535}}, sourceNamespace: tc.fleet})
		checkBusClient(t, tc.name+" kv-listener", parts["c-continuum-kv-listener"], busClient{command: "kv-listener", namespace: "routers",
			args:   []string{"--router=https://router.example.com:7444", "--id=kv-a", "--backend=vllm-1=http://vllm-1:8080/events"},
			secret: tc.secret, egress: [][]int{{53}, {7444}, {8080}}})
		disjoint(t, tc.name+" broker", parts[""], parts["c-continuum-broker"])
		disjoint(t, tc.name+" kv-listener", parts[""], parts["c-continuum-kv-listener"])
	}

	// The kubelet gives each client its drain and 20 s more.
	for _, tc := range []struct {
		grace string
		want  int64
	}{{"10s", 30}, {"1m", 80}} {
		out, err := run(t, helm, append(slices.Clone(base), "--set", "eventBroker.token=t1", "--set", "kvListener.token=t2",
			"--set", "eventBroker.drainGrace="+tc.grace, "--set", "kvListener.drainGrace="+tc.grace)...)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range parse(t, "grace "+tc.grace, out).deployments {
			if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; d.Name != "c-continuum" && (g == nil || *g != tc.want) {
				t.Errorf("%s with drainGrace %s: terminationGracePeriodSeconds %v, want %d", d.Name, tc.grace, g, tc.want)
			}
		}
	}

	// Rendering refuses what the clients would refuse, with the reason.
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--set", "eventBroker.enabled=true", "--set", "eventBroker.id=b", "--set", "eventBroker.token=t"}, "the router's event bus listener is required"},
		{[]string{"--set", "eventBroker.enabled=true", "--set", "eventBroker.router=https://r:7443", "--set", "eventBroker.id=b", "--set", "eventBroker.token=t",
			"--set", "eventBroker.drainGrace=1.5m"}, "give whole seconds or minutes"},
		{[]string{"--set", "eventBroker.enabled=true", "--set", "eventBroker.router=http://r:7443", "--set", "eventBroker.id=b", "--set", "eventBroker.token=t"}, "want https://HOST:PORT"},
		{[]string{"--set", "eventBroker.enabled=true", "--set", "eventBroker.router=https://r:7443", "--set", "eventBroker.id=b"}, "eventBroker.tokenSecret.name (or eventBroker.token), or eventBroker.certSecret, is required"},
		{[]string{"--set", "eventBroker.enabled=true", "--set", "eventBroker.router=https://r:7443", "--set", "eventBroker.token=t"}, "eventBroker.id is required"},
		{[]string{"--set", "kvListener.enabled=true", "--set", "kvListener.router=https://r:7443", "--set", "kvListener.id=k", "--set", "kvListener.token=t"}, "kvListener.backends is required"},
		{[]string{"--set", "eventBroker.enabled=true", "--set", "eventBroker.router=https://r:7443", "--set", "eventBroker.id=b", "--set", "eventBroker.token=t",
			"--set", "eventBroker.dynamoNamespaces={dynamo}", "--set", "eventBroker.replicaCount=2"}, "eventBroker.replicaCount: one process per entry"},
	} {
		_, err := run(t, helm, append([]string{"template", "c", chart}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: err %v, want %q", tc.args, err, tc.msg)
		}
	}
}

func TestKustomizeBusClients(t *testing.T) {
	kustomize := tool(t, "kustomize")
	for _, tc := range []struct {
		dir string
		w   busClient
	}{
		{"event-broker", busClient{command: "broker", namespace: "dynamo", apiAccess: true, secret: true, sourceNamespace: "dynamo",
			args:   []string{"--source=kubernetes", "--kube-namespace=dynamo", "--dynamo-namespace=dynamo"},
			egress: [][]int{{443, 6443}, {53}, {7443}, {1024, 65535}}}},
		{"kv-listener", busClient{command: "kv-listener", namespace: "dynamo", secret: true,
			args: []string{"--id=kv-listener-a"}, egress: [][]int{{53}, {7443}, {8080}}}},
	} {
		out, err := run(t, kustomize, "build", deployDir(t, "kustomize", tc.dir))
		if err != nil {
			t.Fatal(err)
		}
		checkBusClient(t, "kustomize "+tc.dir, parse(t, tc.dir, out), tc.w)
	}
}

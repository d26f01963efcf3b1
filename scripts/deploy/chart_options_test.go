package deploy

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/continuum-router/continuum/internal/config"
)

// TestHelmRouterExposesEventBusListener: with dynamo.event_bus.enabled the
// router runs a listener of its own on dynamo.event_bus.listen, which the
// in-cluster broker and kv-listener dial: the router's pod and Service
// carry that port.
func TestHelmRouterExposesEventBusListener(t *testing.T) {
	helm := tool(t, "helm")
	chart := deployDir(t, "helm", "continuum")
	out, err := run(t, helm, "template", "c", chart, "--namespace", "routers",
		"--set-json", `config.dynamo={"enabled":true,"discovery":{"source":"kubernetes","kubernetes":{"namespace":"dynamo","dynamo_namespace":"dynamo"}},`+
			`"load":{"transport":"broker"},"shim":{"backends":["dynamo-frontend"]},`+
			`"event_bus":{"enabled":true,"listen":"0.0.0.0:7443","tls":{"cert":"/etc/bus/tls.crt","key":"/etc/bus/tls.key"},`+
			`"brokers":[{"id":"broker-a.dynamo","token_hash":"sha256:`+strings.Repeat("0", 64)+`","namespaces":["dynamo"]}]}}`,
		"--set", "config.disaggregated_serving.enabled=true",
		// The fleet's API reached through a kubeconfig (the router's own
		// cluster need not be the workers').
		"--set", "extraEnv[0].name=KUBECONFIG", "--set", "extraEnv[0].value=/etc/kube/config",
		"--set", "eventBroker.enabled=true", "--set", "eventBroker.router=https://c-continuum.routers.svc:7443",
		"--set", "eventBroker.id=broker-a.dynamo", "--set", "eventBroker.token=t")
	if err != nil {
		t.Fatal(err)
	}
	parts := partition(parse(t, "event bus", out), "c-continuum-broker")
	router := parts[""]
	if len(router.deployments) != 1 || len(router.services) != 1 || len(router.configMaps) != 1 {
		t.Fatalf("want the router's Deployment, Service and ConfigMap")
	}
	doc, err := config.Parse("continuum.yaml", []byte(router.configMaps[0].Data["continuum.yaml"]), config.Options{})
	if err != nil || doc.Findings.Errors() > 0 {
		t.Fatalf("router config: %v %v", err, doc.Findings)
	}
	if !doc.Config.Dynamo.EventBus.Enabled {
		t.Fatalf("event bus not enabled in the rendered config")
	}
	c := router.deployments[0].Spec.Template.Spec.Containers[0]
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == 7443 }) {
		t.Errorf("router container ports %v: no port for dynamo.event_bus.listen 0.0.0.0:7443", c.Ports)
	}
	if !slices.ContainsFunc(router.services[0].Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == 7443 }) {
		t.Errorf("router Service ports %v: the broker's --router https://c-continuum.routers.svc:7443 has nothing to reach", router.services[0].Spec.Ports)
	}
}

// TestHelmBusClientCertificateCredential: the event bus authenticates a bus
// client by a bearer token OR by a client certificate (tls.client_ca, DNS
// SAN = id); config validate accepts an entry with no token_hash when
// tls.client_ca is set, and the CLI has --cert/--key. The chart deploys such
// a client (eventBroker.certSecret, a kubernetes.io/tls Secret, mounted and
// passed as --cert/--key).
func TestHelmBusClientCertificateCredential(t *testing.T) {
	helm := tool(t, "helm")
	chart := deployDir(t, "helm", "continuum")
	out, err := run(t, helm, "template", "c", chart, "--namespace", "routers",
		"--set", "eventBroker.enabled=true", "--set", "eventBroker.router=https://router.example.com:7443",
		"--set", "eventBroker.id=broker-a.dynamo", "--set", "eventBroker.certSecret=broker-a-tls")
	if err != nil {
		t.Fatalf("a certificate-only broker does not render: %v", err)
	}
	b := partition(parse(t, "cert", out), "c-continuum-broker")["c-continuum-broker"]
	if len(b.deployments) != 1 {
		t.Fatalf("want the broker's Deployment, got %d", len(b.deployments))
	}
	spec := b.deployments[0].Spec.Template.Spec
	args := spec.Containers[0].Args
	hasPrefix := func(p string) bool {
		return slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, p) })
	}
	if !hasPrefix("--cert=") || !hasPrefix("--key=") || hasPrefix("--token-file=") {
		t.Errorf("broker args %q: want --cert and --key, no --token-file", args)
	}
	if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "broker-a-tls" }) {
		t.Errorf("no volume from Secret broker-a-tls")
	}
}

// TestHelmKVListenerEgressFollowsBackends: the kv-listener's NetworkPolicy
// lets it reach the backends it announces, on the ports of their URLs (the
// scheme's when a URL writes none), as the router's port comes from
// --router's URL.
func TestHelmKVListenerEgressFollowsBackends(t *testing.T) {
	helm := tool(t, "helm")
	chart := deployDir(t, "helm", "continuum")
	out, err := run(t, helm, "template", "c", chart, "--namespace", "routers",
		"--set", "kvListener.enabled=true", "--set", "kvListener.router=https://router.example.com:7443",
		"--set", "kvListener.id=kv-a", "--set", "kvListener.token=t",
		"--set-json", `kvListener.backends=[{"name":"vllm-1","url":"http://vllm-1.dynamo.svc:8000/kv/events"},{"name":"vllm-2","url":"http://vllm-2.dynamo.svc/kv/events"}]`)
	if err != nil {
		t.Fatal(err)
	}
	k := partition(parse(t, "kv", out), "c-continuum-kv-listener")["c-continuum-kv-listener"]
	if len(k.netpols) != 1 {
		t.Fatalf("want the kv-listener's NetworkPolicy, got %d", len(k.netpols))
	}
	allowed := map[int]bool{}
	for _, r := range k.netpols[0].Spec.Egress {
		for _, p := range r.Ports {
			allowed[p.Port.IntValue()] = true
		}
	}
	for _, want := range []int{8000, 80} {
		if !allowed[want] {
			t.Errorf("egress allows ports %v: a backend on port %d (from kvListener.backends) is unreachable", allowed, want)
		}
	}
}

// TestHelmDynamoNamespacesRenderValidConfig: with several Dynamo
// namespaces the router needs shim.pools (one per namespace), where the
// chart's routerConfig default gives shim.backends: without pools the
// render fails saying so, and with pools in config the rendered file is one
// the router accepts (the default shim.backends left out).
func TestHelmDynamoNamespacesRenderValidConfig(t *testing.T) {
	helm := tool(t, "helm")
	chart := deployDir(t, "helm", "continuum")
	args := []string{"template", "c", chart, "--namespace", "routers",
		"--set", "dynamoPodDiscovery.enabled=true", "--set", "dynamoPodDiscovery.model=m",
		"--set-json", `dynamoPodDiscovery.dynamoNamespaces=["ns-a","ns-b"]`}
	if _, err := run(t, helm, args...); err == nil || !strings.Contains(err.Error(), "shim.pools") {
		t.Errorf("two namespaces without pools: err %v, want the render refused naming shim.pools", err)
	}
	out, err := run(t, helm, append(args,
		"--set-json", `config.backends=[{"name":"frontend-a","url":"http://frontend.ns-a.svc:8000"},{"name":"frontend-b","url":"http://frontend.ns-b.svc:8000"}]`,
		"--set-json", `config.dynamo={"shim":{"pools":[{"namespace":"ns-a","backends":["frontend-a"]},{"namespace":"ns-b","backends":["frontend-b"]}]}}`)...)
	if err != nil {
		t.Fatal(err)
	}
	m := parse(t, "dynamoNamespaces", out)
	doc, err := config.Parse("continuum.yaml", []byte(m.configMaps[0].Data["continuum.yaml"]), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range doc.Findings {
		if f.Severity == config.SeverityError {
			t.Errorf("rendered config refused by the router: %s", f)
		}
	}
}

// TestHelmBrokerAlone: a broker goes into the workers' cluster for a
// router that runs outside it; with the router switched off
// (router.enabled=false) only the broker's objects render, no router
// Deployment, Service, ConfigMap or ServiceAccount beside it.
func TestHelmBrokerAlone(t *testing.T) {
	helm := tool(t, "helm")
	chart := deployDir(t, "helm", "continuum")
	out, err := run(t, helm, "template", "c", chart, "--namespace", "dynamo", "--set", "router.enabled=false",
		"--set", "eventBroker.enabled=true", "--set", "eventBroker.router=https://router.example.com:7443",
		"--set", "eventBroker.id=broker-a.dynamo", "--set", "eventBroker.token=t")
	if err != nil {
		t.Fatal(err)
	}
	parts := partition(parse(t, "broker alone", out), "c-continuum-broker")
	if r := parts[""]; len(r.all) != 0 {
		t.Errorf("a broker-only install renders %d router objects (Deployment %d, Service %d, ConfigMap %d)",
			len(r.all), len(r.deployments), len(r.services), len(r.configMaps))
	}
	if len(parts["c-continuum-broker"].deployments) != 1 {
		t.Errorf("no broker Deployment")
	}
}

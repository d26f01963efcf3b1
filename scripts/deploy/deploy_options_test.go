package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/continuum-router/continuum/internal/config"
)

// busRouterConfig is a router whose load signals come through in-cluster
// brokers (dynamo.load.transport: broker) over its event bus listener.
const busRouterConfig = `config.dynamo={"enabled":true,"discovery":{"source":"kubernetes","kubernetes":{"namespace":"dynamo","dynamo_namespace":"dynamo"}},` +
	`"load":{"transport":"broker"},"shim":{"backends":["dynamo-frontend"]},` +
	`"event_bus":{"enabled":true,"listen":"0.0.0.0:7443","tls":{"cert":"/etc/bus/tls.crt","key":"/etc/bus/tls.key"},` +
	`"brokers":[{"id":"broker-a.dynamo","token_hash":"sha256:0000000000000000000000000000000000000000000000000000000000000000","namespaces":["dynamo"]}]}}`

// TestHelmBusRouterIsOneProcess: a broker (and a kv-listener) holds one
// session per entry and dials one address; the router keeps one session per
// entry (a newer one supersedes it). Behind the router's Service, the
// broker's session lands on one router pod: every other replica has no
// broker covering the namespace, so its subscriptions stay pending and it
// picks round-robin on stale load (design §18/§19). A router with its event
// bus listener must not render with more than one replica.
func TestHelmBusRouterIsOneProcess(t *testing.T) {
	helm := tool(t, "helm")
	chart := deployDir(t, "helm", "continuum")
	args := []string{"template", "c", chart, "--namespace", "routers", "--set-json", busRouterConfig,
		"--set", "extraEnv[0].name=KUBECONFIG", "--set", "extraEnv[0].value=/etc/kube/config"}
	if _, err := run(t, helm, args...); err != nil {
		t.Fatalf("one replica: %v", err)
	}
	out, err := run(t, helm, append(slices.Clone(args), "--set", "replicaCount=3")...)
	if err == nil {
		m := parse(t, "bus replicas", out)
		n := int32(0)
		for _, d := range m.deployments {
			if d.Name == "c-continuum" && d.Spec.Replicas != nil {
				n = *d.Spec.Replicas
			}
		}
		t.Errorf("a router with dynamo.event_bus.enabled renders with %d replicas behind one Service: "+
			"each broker/kv-listener entry has one session, so all replicas but one get no broker and route on stale load", n)
	} else if !strings.Contains(err.Error(), "replicaCount") {
		t.Errorf("render refused, but not naming replicaCount: %v", err)
	}
}

// TestConfigChangeReloadsInPlace: the router reloads its file when the
// ConfigMap's symlink swaps (internal/routerd Reload.File), applying each
// change in its tier without touching discovery, the registry, the KV
// index or the bus sessions (design §10, §18 "핫 리로드"). A change of an
// immediate-tier key (dynamo.load.max_staleness) must therefore not change
// the router's pod template (Helm) nor the ConfigMap's name the pod mounts
// (Kustomize): either rolls every router pod, losing all of that.
func TestConfigChangeReloadsInPlace(t *testing.T) {
	helm := tool(t, "helm")
	chart := deployDir(t, "helm", "continuum")
	var tpl []string
	for _, staleness := range []string{"3s", "5s"} {
		out, err := run(t, helm, "template", "c", chart, "--namespace", "routers",
			"--set", "dynamoPodDiscovery.enabled=true", "--set", "dynamoPodDiscovery.metadata=true",
			"--set", "config.dynamo.load.max_staleness="+staleness)
		if err != nil {
			t.Fatal(err)
		}
		m := parse(t, "staleness "+staleness, out)
		doc, err := config.Parse("continuum.yaml", []byte(m.configMaps[0].Data["continuum.yaml"]), config.Options{})
		if err != nil || doc.Findings.Errors() > 0 || doc.Config.Dynamo.Load.MaxStaleness.D().String() != staleness {
			t.Fatalf("rendered config: %v %v", err, doc.Findings)
		}
		tmpl := m.deployments[0].Spec.Template
		tpl = append(tpl, tmpl.String())
	}
	if tpl[0] != tpl[1] {
		t.Errorf("helm: changing dynamo.load.max_staleness (an immediate-tier reload) changes the router's pod template " +
			"(annotation checksum/config): every router pod is replaced instead of reloading the file")
	}

	kustomize := tool(t, "kustomize")
	out, err := run(t, kustomize, "build", deployDir(t, "kustomize", "overlays", "dynamo-metadata-discovery"))
	if err != nil {
		t.Fatal(err)
	}
	m := parse(t, "kustomize", out)
	cm := m.configMaps[0].Name
	if cm != "continuum-config" {
		t.Errorf("kustomize: the ConfigMap is %q, named by its content: any change of continuum.yaml creates a new one and rolls the router's pods "+
			"instead of reloading the file in place", cm)
	}
}

// TestKustomizeImagesPinned: the Kustomize manifests name an image tag
// that stays put: ":latest" (with the kubelet's Always pull policy where
// none is written) runs whatever was pushed last, a broker or kv-listener
// of another release than the router.
func TestKustomizeImagesPinned(t *testing.T) {
	kustomize := tool(t, "kustomize")
	chart, err := os.ReadFile(filepath.Join(deployDir(t, "helm", "continuum"), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^appVersion: "?([^"\s]+)"?$`).FindSubmatch(chart)
	if m == nil {
		t.Fatal("Chart.yaml has no appVersion")
	}
	release := string(m[1])
	for _, dir := range []string{"base", "overlays/dynamo-pod-discovery", "overlays/dynamo-metadata-discovery", "event-broker", "kv-listener"} {
		out, err := run(t, kustomize, "build", deployDir(t, "kustomize", dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range parse(t, dir, out).deployments {
			for _, c := range d.Spec.Template.Spec.Containers {
				ref := c.Image
				if i := strings.LastIndexByte(ref, '/'); i >= 0 {
					ref = ref[i+1:]
				}
				_, tag, ok := strings.Cut(ref, ":")
				if !strings.Contains(c.Image, "@sha256:") && (!ok || tag == "latest") {
					t.Errorf("%s: %s container %s runs image %q (pull policy %q): not pinned", dir, d.Name, c.Name, c.Image, c.ImagePullPolicy)
				} else if tag != release {
					t.Errorf("%s: %s container %s runs image %q, not the chart's release %s", dir, d.Name, c.Name, c.Image, release)
				}
			}
		}
	}
}

// TestHelmHandWrittenKubernetesSourceCanRead: the chart's values say
// everything in config but dynamoPodDiscovery's keys is taken as written,
// and its own test renders a router whose config names source kubernetes
// by hand. Such a router reads the API with in-cluster credentials
// (design §12: tried before KUBECONFIG), so its pod needs its token and a
// Role of get/list/watch in kubernetes.namespace (§12, §13 RBAC). Rendered
// without either (and no KUBECONFIG given), discovery never seeds and the
// router is never ready.
func TestHelmHandWrittenKubernetesSourceCanRead(t *testing.T) {
	helm := tool(t, "helm")
	chart := deployDir(t, "helm", "continuum")
	out, err := run(t, helm, "template", "c", chart, "--namespace", "routers",
		"--set-json", `config.dynamo={"enabled":true,"discovery":{"source":"kubernetes","kubernetes":{"namespace":"dynamo","dynamo_namespace":"dynamo"}},"shim":{"backends":["dynamo-frontend"]}}`)
	if err != nil {
		if strings.Contains(err.Error(), "dynamoPodDiscovery") {
			return // refused, pointing at the switch that grants the access
		}
		t.Fatal(err)
	}
	m := parse(t, "hand-written source", out)
	spec := m.deployments[0].Spec.Template.Spec
	token := spec.AutomountServiceAccountToken != nil && *spec.AutomountServiceAccountToken
	kubeconfig := slices.ContainsFunc(spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "KUBECONFIG" })
	roleInFleet := slices.ContainsFunc(m.roles, func(r *rbacv1.Role) bool { return r.Namespace == "dynamo" && rulesEqual(r.Rules, metadataRules) })
	if !kubeconfig && (!token || !roleInFleet) {
		t.Errorf("config.dynamo.discovery.source kubernetes rendered with token mounted %v, a Role in namespace dynamo %v, no KUBECONFIG: "+
			"the router cannot list dynamoworkermetadatas and is never ready", token, roleInFleet)
	}
}

// TestHelmArtifactCacheSizable: the artifact cache holds every pinned
// artifact's blob (each up to 64 MiB, design §17; the number of pins is not
// bounded), on an emptyDir whose sizeLimit the comment says to "size to
// the pins". A cache past the sizeLimit gets the pod evicted by the
// kubelet; the chart must let the operator size it.
func TestHelmArtifactCacheSizable(t *testing.T) {
	helm := tool(t, "helm")
	chart := deployDir(t, "helm", "continuum")
	out, err := run(t, helm, "template", "c", chart, "--namespace", "routers", "--set", "artifactCache.sizeLimit=2Gi")
	if err != nil {
		t.Fatal(err)
	}
	m := parse(t, "cache", out)
	for _, v := range m.deployments[0].Spec.Template.Spec.Volumes {
		if v.Name == "cache" {
			if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.String() != "2Gi" {
				t.Errorf("artifact cache volume %+v: sizeLimit is fixed at 512Mi whatever the values say (nine pinned artifacts of 64 MiB exceed it)", v.EmptyDir)
			}
			return
		}
	}
	t.Errorf("no cache volume")
}

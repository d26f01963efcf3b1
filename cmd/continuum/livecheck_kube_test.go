//go:build kube

package main_test

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/testutil/kubeapi"
)

// hostIP is an IPv4 address of this host other than loopback: the API
// server's pod proxy refuses loopback and link-local pod addresses.
func hostIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip := n.IP.To4(); ip != nil && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
				return ip.String()
			}
		}
	}
	testutil.SkipOrFailInCI(t, "no IPv4 address but loopback: the API server cannot proxy to a pod here")
	return ""
}

// TestBrokerLiveCheckKube runs the live check of the broker tunnel with the
// upstream kubectl against a real kube-apiserver: the broker pods are found
// by their label, a running pod's metrics are read through the API
// server's pod proxy from the broker process it stands for (its pod IP
// this host's address), and a pod that is not running fails the check.
func TestBrokerLiveCheckKube(t *testing.T) {
	kubectl := kubeapi.Kubectl(t)
	api := kubeapi.Start(t)
	ip := hostIP(t)
	b := startBrokered(t, net.JoinHostPort(ip, "0"))
	router, bus, metricsURL := b.router, b.bus, b.brokerMetricsURL
	u, err := url.Parse(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	cs := api.Clientset(t)
	const ns = "brokers"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app.kubernetes.io/name": "continuum-broker"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "broker", Image: "ghcr.io/continuum-router/continuum:latest",
				Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: int32(port), Protocol: corev1.ProtocolTCP}}}}},
		}
	}
	running, err := cs.CoreV1().Pods(ns).Create(ctx, pod("continuum-broker-a"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	running.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, running, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod("continuum-broker-b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod of something else in the namespace is not a broker's.
	other := pod("other")
	other.Labels = map[string]string{"app.kubernetes.io/name": "other"}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	env := []string{"ROUTER_ADMIN_TOKEN=demo", "KUBECONFIG=" + api.WriteKubeconfig(t, kubeapi.AdminUser)}
	args := []string{"--router-url", router, "--context", "kubeapi", "--namespace", ns, "--kubectl", kubectl, "--window", "1"}
	out, code := liveCheck(t, env, args...)
	t.Logf("one broker pod pending:\n%s", out)
	if code != 1 {
		t.Errorf("exit %d with a broker pod pending, want 1", code)
	}
	outputHas(t, out,
		"PASS  broker pod continuum-broker-a: session up, 6 streams relayed, 6 publishers advertised",
		"FAIL  broker pod continuum-broker-b is Pending",
		"== result: FAILED")
	if strings.Contains(out, "pod other") {
		t.Error("a pod without the broker label was checked")
	}

	if err := cs.CoreV1().Pods(ns).Delete(ctx, "continuum-broker-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	out, code = liveCheck(t, env, args...)
	t.Logf("the broker pod running:\n%s", out)
	// No traffic: the idle fleet publishes no sample, which is no failure.
	if code != 0 || !strings.Contains(out, "PASS  broker pod continuum-broker-a: session up") ||
		!strings.Contains(out, "WARN  no kv_metrics sample arrived in the window, and no request was routed") {
		t.Errorf("exit %d with the broker pod running and the fleet idle, want 0", code)
	}

	// The relay latency probe: a one-off pod of the image, non-root, that
	// times handshakes with the bus address. No kubelet runs here, so it
	// never starts: the check fails, and the pod is deleted.
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	out, code = liveCheck(t, env, append(args, "--probe-image", "curlimages/curl:8.11.1", "--bus-url", "https://"+bus,
		"--probes", "3", "--probe-timeout", "3")...)
	t.Logf("the probe pod not starting:\n%s", out)
	if code != 1 || !strings.Contains(out, "== 3. relay latency (from brokers to https://"+bus+", 3 handshakes)") ||
		!strings.Contains(out, "FAIL  the probe pod did not run") {
		t.Errorf("exit %d with the probe pod not starting, want 1 and the failure", code)
	}
	var probe *corev1.Pod
	deleted := false
	deadline := time.After(30 * time.Second)
	for !deleted {
		select {
		case ev, open := <-w.ResultChan():
			if !open {
				t.Fatalf("the watch of the pods ended (probe pod created: %v)", probe != nil)
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || !strings.HasPrefix(p.Name, "continuum-live-check-") {
				continue
			}
			if probe == nil {
				probe = p
			}
			deleted = ev.Type == "DELETED"
		case <-deadline:
			t.Fatalf("the probe pod was not created and deleted (created: %v)", probe != nil)
		}
	}
	sc := probe.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("the probe pod may run as root: %+v", sc)
	}
	if len(probe.Spec.Containers) != 1 {
		t.Fatalf("probe containers: %+v", probe.Spec.Containers)
	}
	c := probe.Spec.Containers[0]
	if c.Image != "curlimages/curl:8.11.1" || len(c.Command) != 3 || c.Command[0] != "sh" ||
		!strings.Contains(c.Command[2], "seq 3") || !strings.Contains(c.Command[2], "'https://"+bus+"/'") {
		t.Errorf("probe container: image %q, command %q", c.Image, c.Command)
	}
	if c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("the probe container may escalate: %+v", c.SecurityContext)
	}

	// The probe's timing, with its command run on this host against the
	// bus's real TLS listener: kubectl as it is, but for `run`, which
	// executes the pod's command here in place of a kubelet.
	local := filepath.Join(t.TempDir(), "kubectl")
	wrapper := `#!/usr/bin/env bash
run=0 prev="" overrides=""
for a in "$@"; do
  [[ "$a" == run ]] && run=1
  [[ "$prev" == --overrides ]] && overrides=$a
  prev=$a
done
((run)) || exec ` + strconv.Quote(kubectl) + ` "$@"
exec sh -c "$(jq -r '.spec.containers[0].command[2]' <<<"$overrides")"
`
	if err := os.WriteFile(local, []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	localArgs := slices.Clone(args)
	localArgs[slices.Index(localArgs, kubectl)] = local
	out, code = liveCheck(t, env, append(localArgs, "--probe-image", "curlimages/curl:8.11.1", "--bus-url", "https://"+bus, "--probes", "5")...)
	t.Logf("the probe's command run here:\n%s", out)
	if code != 0 || !regexp.MustCompile(`PASS  5 of 5 handshakes: median TCP \d+\.\d\d ms, TCP\+TLS \d+\.\d\d ms; one-way estimate \(half of TCP\+TLS\) \d+\.\d\d ms, half the TCP round trip \d+\.\d\d ms`).MatchString(out) {
		t.Errorf("exit %d with the probe's command run here, want 0 and the timing", code)
	}

	// A selector no pod matches fails the check.
	out, code = liveCheck(t, env, append(args, "--selector", "app.kubernetes.io/name=nothing")...)
	if code != 1 || !strings.Contains(out, "FAIL  no broker pods match app.kubernetes.io/name=nothing in namespace brokers") {
		t.Errorf("exit %d with no pod matching:\n%s", code, out)
	}
}

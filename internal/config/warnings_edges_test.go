package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/config"
)

// TestEmptyBrokerNamespacesWarned: a broker entry with
// an empty namespaces list may declare every namespace, with a validation
// (and startup) warning; a kv_listener entry (no namespaces by rule) and a
// broker that lists its namespaces are not warned about.
func TestEmptyBrokerNamespacesWarned(t *testing.T) {
	hash := strings.Repeat("0", 64)
	const bus = `dynamo:
  enabled: true
  discovery: {etcd: {endpoints: ["http://e:2379"]}}
  load: {transport: broker}
  event_bus:
    enabled: true
    tls: {cert: c, key: k}
    brokers:
%s`
	doc := parse(t, fmt.Sprintf(bus, `      - {id: broker-a, token_hash: "sha256:`+hash+`"}`+"\n"))
	if !hasFinding(doc, config.SeverityWarning, "dynamo.event_bus.brokers[0].namespaces", "every Dynamo namespace") || doc.Findings.Errors() != 0 {
		t.Errorf("empty allowlist: %v", doc.Findings)
	}
	doc = parse(t, fmt.Sprintf(bus, `      - {id: broker-a, token_hash: "sha256:`+hash+`", namespaces: []}`+"\n"))
	if !hasFinding(doc, config.SeverityWarning, "dynamo.event_bus.brokers[0].namespaces", "every Dynamo namespace") {
		t.Errorf("explicit empty allowlist: %v", doc.Findings)
	}
	doc = parse(t, fmt.Sprintf(bus, `      - {id: broker-a, token_hash: "sha256:`+hash+`", namespaces: [dynamo]}`+"\n"+
		`      - {id: kv-a, role: kv_listener, token_hash: "sha256:`+strings.Repeat("1", 64)+`", backends: [v]}`+"\n"))
	for _, f := range doc.Findings {
		if strings.Contains(f.Message, "every Dynamo namespace") {
			t.Errorf("warned with namespaces listed or for a kv_listener: %v", f)
		}
	}
}

// TestKubernetesSourceWarnings: with source: kubernetes,
// kubernetes.model and kubernetes.models are ignored and warned about when
// set; source: kubernetes_pods warns that it gives no load or
// capacity signals (round robin).
func TestKubernetesSourceWarnings(t *testing.T) {
	const doc = `dynamo:
  enabled: true
  discovery:
    source: %s
    kubernetes:
      namespace: dynamo
      dynamo_namespace: dynamo-a
%s
  shim: {backends: [f]}
backends: [{name: f, url: "http://f:8000"}]
`
	meta := parse(t, fmt.Sprintf(doc, "kubernetes", "      model: m"))
	if !hasFinding(meta, config.SeverityWarning, "dynamo.discovery.kubernetes.model", "ignored") || meta.Findings.Errors() != 0 {
		t.Errorf("model with source kubernetes: %v", meta.Findings)
	}
	meta = parse(t, fmt.Sprintf(doc, "kubernetes", "      models: [{component: c, model: m}]"))
	if !hasFinding(meta, config.SeverityWarning, "dynamo.discovery.kubernetes.models", "ignored") || meta.Findings.Errors() != 0 {
		t.Errorf("models with source kubernetes: %v", meta.Findings)
	}
	meta = parse(t, fmt.Sprintf(doc, "kubernetes", ""))
	for _, f := range meta.Findings {
		if strings.Contains(f.Message, "ignored") {
			t.Errorf("warned without model/models: %v", f)
		}
	}
	pods := parse(t, fmt.Sprintf(doc, "kubernetes_pods", "      model: m"))
	if !hasFinding(pods, config.SeverityWarning, "dynamo.discovery.source", "round-robin") || pods.Findings.Errors() != 0 {
		t.Errorf("kubernetes_pods: %v", pods.Findings)
	}
	for _, f := range pods.Findings {
		if strings.Contains(f.Message, "is ignored") {
			t.Errorf("kubernetes_pods uses model; warned as ignored: %v", f)
		}
	}
}

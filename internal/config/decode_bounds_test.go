package config_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
)

// TestMergedKeysCountAgainstNodeBound: every key a mapping holds counts
// against the 200,000-node bound, the keys merge keys (<<) bring in too:
// a small file merging one mapping of many keys into many others is as
// large as the mappings it makes, and is refused as too large.
func TestMergedKeysCountAgainstNodeBound(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("x-a: &a\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "  unknownkey%d: 1\n", i)
	}
	b.WriteString("backends:\n")
	for range 250 {
		b.WriteString("  - <<: *a\n")
	}
	start := time.Now()
	_, err := config.Parse("merge.yaml", []byte(b.String()), config.Options{})
	took := time.Since(start)
	if err == nil || !errors.Is(err, config.ErrUnreadable) || !strings.Contains(err.Error(), "YAML nodes") {
		t.Fatalf("%d bytes expanding to 250000 mapping entries: err = %v after %v, want the document refused as too large (more than 200000 YAML nodes)", b.Len(), err, took)
	}
}

// TestBlankPodModelRefused: kubernetes_pods publishes every ready pod
// under model, so a blank model is refused as a blank models[].model is.
func TestBlankPodModelRefused(t *testing.T) {
	t.Parallel()
	doc, err := config.Parse("test.yaml", []byte(`dynamo:
  enabled: true
  discovery:
    source: kubernetes_pods
    kubernetes:
      namespace: dynamo
      dynamo_namespace: x
      model: "   "
`), config.Options{Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range doc.Findings {
		if f.Severity == config.SeverityError && f.Path == "dynamo.discovery.kubernetes.model" {
			return
		}
	}
	t.Fatalf("model \"   \" under kubernetes_pods: no error at dynamo.discovery.kubernetes.model; findings: %v", doc.Findings)
}

// TestAliasedInterpolationBounded: a value with ${VAR} references (or $${
// escapes) is expanded once, and its aliases share the text: a document of
// one large such value and thousands of aliases costs the value once. Not
// parallel: it reads the heap's allocation counter.
func TestAliasedInterpolationBounded(t *testing.T) {
	big := "$${" + strings.Repeat("a", 64<<10)
	var b strings.Builder
	fmt.Fprintf(&b, "x-v: &v %q\nbackends:\n  - name: a\n    url: \"http://a:1\"\n    models: [", big)
	for i := range 3000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("*v")
	}
	b.WriteString("]\n")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	doc, err := config.Parse("admin import", []byte(b.String()), config.Options{NoEnvRefs: true, MaskedSecrets: true})
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	if err == nil && len(doc.Config.Backends) == 1 {
		total := 0
		for _, m := range doc.Config.Backends[0].Models {
			total += len(m)
		}
		t.Logf("document %d bytes; models hold %d bytes", b.Len(), total)
	}
	if alloc > 64<<20 {
		t.Fatalf("parsing a %d-byte document allocated %d MiB (err = %v): aliased interpolated values are rebuilt at every alias", b.Len(), alloc>>20, err)
	}
}

// TestExpandedTextBounded: the text ${VAR} references produce is bounded
// for a document (a variable's value is not bounded by the file's size):
// past it the document is refused as too large.
func TestExpandedTextBounded(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("m", 1<<20)
	var b strings.Builder
	b.WriteString("backends:\n  - name: a\n    url: \"http://a:1\"\n    models:\n")
	for range 20 {
		b.WriteString("      - \"${BIG}\"\n")
	}
	_, err := config.Parse("big.yaml", []byte(b.String()), config.Options{Env: func(k string) (string, bool) { return big, k == "BIG" }})
	if !errors.Is(err, config.ErrUnreadable) || !strings.Contains(err.Error(), "expand") {
		t.Fatalf("20 references to a 1 MiB variable: err = %v, want the document refused", err)
	}
}

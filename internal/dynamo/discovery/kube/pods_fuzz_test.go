package kube

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// FuzzPodClassify: a pod as the API server serves it (JSON) is classified
// without failing, and a pod record it yields parses back to the pod's
// name and the instance id hashed from it, and is one the reducer reads.
func FuzzPodClassify(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"worker-0","namespace":"k","labels":{"nvidia.com/dynamo-namespace":"dn","nvidia.com/dynamo-component":"VllmWorker","nvidia.com/dynamo-component-type":"worker"}},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}`))
	f.Add([]byte(`{"metadata":{"name":"p","labels":{"nvidia.com/dynamo-namespace":"dn","nvidia.com/dynamo-component":"P","nvidia.com/dynamo-component-type":"worker","nvidia.com/dynamo-sub-component-type":"prefill"},"annotations":{"nvidia.com/dynamo-kube-discovery-mode":"container"}},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var p corev1.Pod
		if json.Unmarshal(raw, &p) != nil || p.Name == "" { // the API server names every pod
			return
		}
		s := &PodsSource{Namespaces: []string{"dn"}, Models: []config.ComponentModel{{Component: "VllmWorker", Model: "m"}, {Component: "P", Model: "m"}}, Logger: slog.New(slog.DiscardHandler)}
		e := s.classify(&p)
		if e.key == "" {
			return
		}
		if strings.HasPrefix(e.key, wire.PrefixPods) {
			rec, err := wire.ParsePodRecord(e.value)
			if err != nil || rec.Pod != p.Name || rec.InstanceID != HashPodName(p.Name) {
				t.Fatalf("%s: %s: %v", e.key, e.value, err)
			}
		}
		r := fleet.NewReducer()
		r.Put(e.key, e.value, time.Unix(0, 0))
		_ = r.Build(time.Unix(0, 0))
	})
}

//go:build kube

package kube_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
	tu "github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/testutil/kubeapi"
)

// TestRealAPIServerMetadataPages: more DynamoWorkerMetadata resources than
// one list page holds (pages of 32, read with the API server's continue
// tokens) and a fleet's readiness split across two EndpointSlices, one per
// half of the pods, give every worker.
func TestRealAPIServerMetadataPages(t *testing.T) {
	s := startMetadataAPIServer(t)
	const n = 70
	var docs []string
	var halves [2][]string
	for i := range n {
		name := fmt.Sprintf("w-%d", i)
		docs = append(docs, fmt.Sprintf(`{"apiVersion":"nvidia.com/v1alpha1","kind":"DynamoWorkerMetadata","metadata":{"name":%q},
"spec":{"data":{"endpoints":{"%s/backend/generate/%x":{"type":"Endpoint","namespace":%q,"component":"backend","endpoint":"generate","instance_id":%d,"transport":{"tcp":"10.1.0.%d:9345/x"}}},"model_cards":null}}}`,
			name, fixtureNS, kube.HashPodName(name), fixtureNS, kube.HashPodName(name), i+1))
		halves[i%2] = append(halves[i%2], fmt.Sprintf(`{"addresses":["10.1.0.%d"],"conditions":{"ready":true},"targetRef":{"kind":"Pod","name":%q,"namespace":%q}}`,
			i+1, name, kubeapi.FleetNamespace))
	}
	for h, eps := range halves {
		docs = append(docs, fmt.Sprintf(`{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","addressType":"IPv4","metadata":{"name":"workers-%d","labels":{
"kubernetes.io/service-name":"workers","nvidia.com/dynamo-discovery-backend":"kubernetes","nvidia.com/dynamo-discovery-enabled":"true"}},
"endpoints":[%s]}`, h, strings.Join(eps, ",")))
	}
	s.ApplyYAML(t, docs...)

	src := kube.NewMetadata(config.Kubernetes{Namespace: kubeapi.FleetNamespace}, []string{fixtureNS},
		kube.ClientOptions{Kubeconfig: s.WriteKubeconfig(t, kubeapi.ServiceAccountUser)}, nil)
	reg, _ := runSource(t, src)
	tu.Eventually(t, 30*time.Second, fmt.Sprintf("%d workers", n), func() bool { return reg.Snapshot().Workers.Len() == n })
	pages := 0
	for _, r := range s.Requests(t) {
		if strings.HasPrefix(r.String(), "list dynamoworkermetadatas") {
			pages++
		}
	}
	if pages < 3 {
		t.Fatalf("%d list pages of dynamoworkermetadatas, want 3 (of 32) for %d resources; requests:\n%v", pages, n, s.Requests(t))
	}
	if f := s.Forbidden(t); len(f) != 0 {
		t.Fatalf("the source asked for more than its Role: %v", f)
	}
}

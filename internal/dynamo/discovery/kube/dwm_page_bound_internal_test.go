package kube

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type fixedBodyRT struct{ body func() io.Reader }

func (f fixedBodyRT) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(f.body()), Request: req}, nil
}

// TestDWMListPageWithinItsOwnBound: a DWM list page of resources each
// under the watch event's bound and together under what the source holds
// (here 3 of 45 MiB) is read whole through the bound every answer of the
// API server is read within.
func TestDWMListPageWithinItsOwnBound(t *testing.T) {
	const each = 45 << 20
	body := func() io.Reader {
		var rs []io.Reader
		rs = append(rs, strings.NewReader(`{"metadata":{"resourceVersion":"1"},"items":[`))
		for i := range 3 {
			if i > 0 {
				rs = append(rs, strings.NewReader(","))
			}
			rs = append(rs, strings.NewReader(`{"x":"`), io.LimitReader(zeroA{}, each), strings.NewReader(`"}`))
		}
		rs = append(rs, strings.NewReader(`]}`))
		return io.MultiReader(rs...)
	}
	c := &dwmClient{http: &http.Client{Transport: boundBodies(fixedBodyRT{body})}, base: "http://api.invalid/apis/x/v1/namespaces/ns/dwm"}
	items, _, err := c.list(context.Background(), metav1.ListOptions{Limit: DWMPageSize})
	if err != nil || len(items) != 3 {
		t.Fatalf("a DWM page of 3 resources of %d MiB (under the list's own bound of %d MiB): %d items, %v",
			each>>20, min(DWMPageSize*maxWatchEventBytes, MaxRecordBytes+maxWatchEventBytes)>>20, len(items), err)
	}
}

type zeroA struct{}

func (zeroA) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'A'
	}
	return len(p), nil
}

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

// TestDWMListPageWithinItsOwnBound: the bound every answer of the API
// server is read within is no tighter than the DWM list's own page bound
// (a page of resources each under the watch event's bound, together under
// what the source holds), and a DWM page is read whole through it.
func TestDWMListPageWithinItsOwnBound(t *testing.T) {
	t.Parallel()
	if page := min(DWMPageSize*maxWatchEventBytes, MaxRecordBytes+maxWatchEventBytes); answerBounds.list < page {
		t.Fatalf("answers are read within %d bytes, less than a DWM page may hold (%d)", answerBounds.list, page)
	}
	const each = 1 << 20
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

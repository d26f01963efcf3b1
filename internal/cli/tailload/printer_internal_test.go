package tailload

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// TestPublisherFailedOncePerChange: in a fleet, a publisher's connection
// failing the same way again prints nothing; a message from it in between
// makes its next failure news; what is remembered is bounded.
func TestPublisherFailedOncePerChange(t *testing.T) {
	t.Parallel()
	var errOut bytes.Buffer
	ios := &iostreams.IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: &errOut}
	p := newPrinter(&Options{IO: ios, JSON: true}, func() {})
	p.fleet, p.failed = true, map[uint64]string{}
	p.publisherFailed(7, io.EOF)
	p.publisherFailed(7, io.EOF)
	if n := strings.Count(errOut.String(), "publisher 7:"); n != 1 {
		t.Fatalf("%d lines for one failure repeated:\n%s", n, errOut.String())
	}
	p.observe(load.Event{PublisherID: 7, Result: "accepted"})
	p.publisherFailed(7, io.EOF)
	if n := strings.Count(errOut.String(), "publisher 7:"); n != 2 {
		t.Errorf("%d lines: the failure after its messages came back was not told:\n%s", n, errOut.String())
	}
	for pid := range uint64(2 * maxFailedPublishers) {
		p.publisherFailed(1000+pid, io.EOF)
	}
	if len(p.failed) > maxFailedPublishers {
		t.Errorf("%d failed publishers remembered", len(p.failed))
	}
}

package router

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkUpstream sends requests through the router's upstream client and
// through http.Transport, configured alike, to the same fast backend, one
// at a time and from parallel goroutines, buffered and SSE: ns/op and
// allocs/op are the two clients' costs in the same run (client and backend
// share the process).
func BenchmarkUpstream(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(streamingHandler))
	b.Cleanup(srv.Close)
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	clients := []struct {
		name string
		rt   http.RoundTripper
	}{
		{"transport", newHTTPTransport(dialer)},
		{"upstream", newTransport()},
	}
	for _, path := range []string{"/buffered", "/stream"} {
		for _, c := range clients {
			one := func() error {
				req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(`{"model":"m"}`))
				if err != nil {
					return err
				}
				resp, err := c.rt.RoundTrip(req)
				if err != nil {
					return err
				}
				_, err = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				return err
			}
			b.Run(path[1:]+"/serial/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := one(); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(path[1:]+"/parallel/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := one(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

package routerd_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestH2ClientTakesNothing: an HTTP/2 client that grants its stream no
// flow-control window takes none of its streamed answer, and no write
// ever blocks on the socket; write_timeout still ends that stream (a
// reset of it alone) and the backend request with it, instead of holding
// them, and the request's in-flight slot, for as long as the connection
// stays up.
func TestH2ClientTakesNothing(t *testing.T) {
	t.Parallel()
	backendEnded := make(chan struct{})
	be := endlessStream(t, `data: {"choices":[{"index":0,"delta":{"content":"`+strings.Repeat("a", 900)+`"}}]}`+"\n\n", backendEnded)

	pki := testutil.NewTestPKI(t)
	cfg := plainCfg(be.URL)
	cfg.Server.TLS = &config.ServerTLS{Cert: pki.ServerCert, Key: pki.ServerKey}
	cfg.Server.WriteTimeout = config.Duration(500 * time.Millisecond)
	d, _ := runDaemon(t, cfg)

	pool := x509.NewCertPool()
	ca, err := os.ReadFile(pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(ca)
	c, err := tls.Dial("tcp", d.Addr(), &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "x"}, {":path", "/v1/chat/completions"},
		{"content-type", "application/json"}, {"content-length", strconv.Itoa(len(body))}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, true, body); err != nil {
		t.Fatal(err)
	}
	// Read every frame (the socket never blocks the server) and answer
	// pings, until stream 1 ends.
	ended := make(chan string, 1)
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				ended <- "connection: " + err.Error()
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					_ = fr.WritePing(true, f.Data)
				}
			case *http2.RSTStreamFrame:
				ended <- "reset"
				return
			case *http2.DataFrame:
				if f.StreamEnded() {
					ended <- "ended"
					return
				}
			case *http2.GoAwayFrame:
				ended <- "goaway"
				return
			}
		}
	}()
	select {
	case how := <-ended:
		if how != "reset" {
			t.Errorf("stream: %s, want a reset", how)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the stream whose client takes nothing is still open 15 s on (write_timeout 500ms)")
	}
	select {
	case <-backendEnded:
	case <-time.After(5 * time.Second):
		t.Error("the backend request outlived the stream")
	}
}

// endlessStream is a backend whose chat completions stream chunk every
// 10 ms until the request ends (then ended, when given, is closed); any
// other request gets an empty model list. It closes when the test ends.
func endlessStream(t *testing.T, chunk string, ended chan<- struct{}) *httptest.Server {
	t.Helper()
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		if ended != nil {
			defer close(ended)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(be.Close)
	return be
}

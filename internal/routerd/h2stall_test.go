package routerd_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
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

// TestServedConnectionsStayBounded: write_timeout bounds the writes of
// every connection net/http serves, after net/http cleared the socket's
// deadlines (it does after a TLS handshake and after each request): a
// client that stops reading its streamed answer is cut, and the backend
// request with it, over TLS (HTTP/1.1 and an HTTP/2 client that grants a
// large window and stops reading the socket) and in the second request
// of a plain connection handed to net/http (a chunked upload).
func TestServedConnectionsStayBounded(t *testing.T) {
	t.Parallel()
	request := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name   string
		secure bool
		// stall sends the request over c and then reads nothing.
		stall func(t *testing.T, c net.Conn)
	}{
		{"tls-http1", true, func(t *testing.T, c net.Conn) {
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(request), request)
		}},
		{"tls-h2", true, func(t *testing.T, c net.Conn) {
			_, _ = c.Write([]byte(http2.ClientPreface))
			fr := http2.NewFramer(c, c)
			_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
			_ = fr.WriteWindowUpdate(0, 1<<31-1-65535)
			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "x"}, {":path", "/v1/chat/completions"},
				{"content-type", "application/json"}, {"content-length", strconv.Itoa(len(request))}} {
				_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
			_ = fr.WriteData(1, true, []byte(request))
		}},
		{"handed-off-second-request", false, func(t *testing.T, c net.Conn) {
			chunked := func(body string) {
				fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
			}
			chunked(`{"model":`) // answered at once: 400
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("first request: %d", resp.StatusCode)
			}
			chunked(request)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			backendEnded := make(chan struct{})
			be := endlessStream(t, `data: {"choices":[{"index":0,"delta":{"content":"`+strings.Repeat("a", 64<<10)+`"}}]}`+"\n\n", backendEnded)
			cfg := plainCfg(be.URL)
			pki := testutil.NewTestPKI(t)
			if tc.secure {
				cfg.Server.TLS = &config.ServerTLS{Cert: pki.ServerCert, Key: pki.ServerKey}
			}
			// Long enough that the socket's send buffer fills (the
			// backend sends 6.4 MB/s) well before half of it has passed,
			// when a bound that missed net/http's clearing would set its
			// deadline again.
			cfg.Server.WriteTimeout = config.Duration(3 * time.Second)
			d, reg := runDaemon(t, cfg)
			raw, err := net.Dial("tcp", d.Addr())
			if err != nil {
				t.Fatal(err)
			}
			_ = raw.(*net.TCPConn).SetReadBuffer(4096)
			c := raw
			if tc.secure {
				pool := x509.NewCertPool()
				ca, err := os.ReadFile(pki.CAFile)
				if err != nil {
					t.Fatal(err)
				}
				pool.AppendCertsFromPEM(ca)
				proto := "http/1.1"
				if tc.name == "tls-h2" {
					proto = "h2"
				}
				tlsConn := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{proto}})
				if err := tlsConn.Handshake(); err != nil {
					t.Fatal(err)
				}
				c = tlsConn
			}
			defer func() { _ = c.Close() }()
			tc.stall(t, c)
			select {
			case <-backendEnded:
			case <-time.After(15 * time.Second):
				t.Fatal("the backend request still runs 15 s after its client stopped reading (write_timeout 3s)")
			}
			testutil.Eventually(t, 5*time.Second, "the stalled connection closed", func() bool {
				return gaugeValue(t, reg, "continuum_http_connections") == 0
			})
		})
	}
}

package router_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
)

// TestConvertedStreamsForwardKeepAlives: a keep-alive the upstream sends
// while it is silent (an SSE comment, as Dynamo's frontend sends during a
// long reasoning) reaches the client of a converted stream while the
// upstream is still silent: a ping event through /v1/messages (the
// Messages API's own), a comment through /v1/responses. Dropped, the
// client heard nothing until the next token and an idle timeout on its
// side cut the answer.
func TestConvertedStreamsForwardKeepAlives(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path, body, want string
	}{
		{"/v1/messages", `{"model":%q,"max_tokens":64,"stream":true,"messages":[{"role":"user","content":"x"}]}`, "event: ping"},
		{"/v1/responses", `{"model":%q,"stream":true,"input":"x"}`, ": keep-alive"},
	} {
		t.Run(strings.TrimPrefix(tc.path, "/v1/"), func(t *testing.T) {
			t.Parallel()
			seen := make(chan struct{})
			fe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, sdkChunk(`{"role":"assistant","content":"Hel"}`))
				w.(http.Flusher).Flush()
				_, _ = io.WriteString(w, ": keep-alive\n\n")
				w.(http.Flusher).Flush()
				// Silent until the client has had the keep-alive (or
				// long past when it should have).
				select {
				case <-seen:
				case <-time.After(20 * time.Second):
				case <-r.Context().Done():
					return
				}
				_, _ = io.WriteString(w, sdkChunk(`{"content":"lo"}`)+sdkFinish("stop")+sdkUsage+"data: [DONE]\n\n")
			}))
			t.Cleanup(fe.Close)
			h := newHarness(t, func(c *config.Config) { c.Backends[0].URL = fe.URL })
			resp, err := http.Post(h.router.URL+tc.path, "application/json", strings.NewReader(fmt.Sprintf(tc.body, model)))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			lines := make(chan string, 64)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			// The first keep-alive sign after the first text: Messages
			// sends a ping of its own after message_start.
			text := false
			deadline := time.After(10 * time.Second)
			for waiting := true; waiting; {
				select {
				case line, ok := <-lines:
					if !ok {
						t.Fatal("the stream ended before the keep-alive")
					}
					if strings.Contains(line, "Hel") {
						text = true
					}
					if text && line == tc.want {
						waiting = false
					}
				case <-deadline:
					t.Fatalf("no %q reached the client while the upstream was silent", tc.want)
				}
			}
			close(seen)
			var rest strings.Builder
			for line := range lines {
				rest.WriteString(line + "\n")
			}
			if !strings.Contains(rest.String(), "lo") {
				t.Errorf("the answer did not go on after the keep-alive: %s", rest.String())
			}
		})
	}
}

package kvlistener_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/cli/kvlistener"
	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/testutil"
)

func factory() *cmdutil.Factory {
	ios, _, _, _ := iostreams.Test()
	return &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv, ConfigPath: func() string { return "" },
		Logger: func() (*slog.Logger, error) { return slog.New(slog.DiscardHandler), nil }}
}

// TestNewCmdKVListener: flags only.
func TestNewCmdKVListener(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args    string
		wantErr string
		want    map[string]string
	}{
		{args: "--router https://r:7443 --id kv-a --token-file t --backend vllm-1=http://v1:8080/events --backend vllm-2=https://v2/e",
			want: map[string]string{"vllm-1": "http://v1:8080/events", "vllm-2": "https://v2/e"}},
		{args: "--router https://r:7443 --id kv-a --token-file t", wantErr: "backend"},
		{args: "--router https://r:7443 --id kv-a --token-file t --backend vllm-1", wantErr: "NAME=URL"},
		{args: "--router https://r:7443 --id kv-a --token-file t --backend vllm-1=ftp://x", wantErr: "not an http(s) URL"},
		{args: "--router https://r:7443 --id kv-a --token-file t --backend a=http://x --backend a=http://y", wantErr: "twice"},
		{args: "--router https://r:7443 --id kv-a --backend a=http://x", wantErr: "no credential"},
	}
	for _, c := range cases {
		var got *kvlistener.Options
		cmd := kvlistener.NewCmdKVListener(factory(), func(_ context.Context, o *kvlistener.Options) error { got = o; return nil })
		cmd.SetArgs(strings.Fields(c.args))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.Execute()
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: err = %v, want %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil || got == nil || len(got.Backends) != len(c.want) {
			t.Fatalf("%s: %v %+v", c.args, err, got)
		}
		for k, v := range c.want {
			if got.Backends[k] != v {
				t.Errorf("%s: backend %s = %q", c.args, k, got.Backends[k])
			}
		}
	}
}

// TestRun: the kv-listener announces its backends, relays one's SSE
// stream from the Last-Event-ID the router asks for, and drains.
func TestRun(t *testing.T) {
	t.Parallel()
	pki := testutil.NewTestPKI(t)
	bus := testutil.StartBus(t, pki, eventbus.Entry{ID: "kv-a", Role: eventbus.RoleKVListener, TokenHash: eventbus.HashToken("tok"), Backends: []string{"vllm-1"}})

	lastID := make(chan string, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lastID <- r.Header.Get("Last-Event-ID")
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "id: 43\nevent: kv\ndata: {}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer backend.Close()
	defer backend.CloseClientConnections()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := &kvlistener.Options{IO: factory().IOStreams, Logger: factory().Logger, Backends: map[string]string{"vllm-1": backend.URL},
		Bus: cmdutil.BusClientFlags{Router: "https://" + bus.LocalAddr().String(), ID: "kv-a", TokenFile: tokenFile, CAFile: pki.CAFile, DrainGrace: 5 * time.Second}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- kvlistener.Run(ctx, o) }()
	testutil.Eventually(t, 15*time.Second, "the kv-listener's session", func() bool { return bus.SessionCount() == 1 })
	last := uint64(42)
	s, err := bus.OpenAnnouncedStream(t.Context(), "vllm-1", &last)
	if err != nil {
		cancel()
		<-done
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := io.ReadAtLeast(s, buf, 6)
	if err != nil || !strings.HasPrefix(string(buf[:n]), "id: 43") || <-lastID != "42" {
		t.Errorf("relayed %q, %v", buf[:n], err)
	}
	_ = s.Close()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

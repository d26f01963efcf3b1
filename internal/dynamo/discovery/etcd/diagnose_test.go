package etcd_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/etcd"
	"github.com/continuum-router/continuum/internal/loopport"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestDiagnose: what a command that gave up on etcd says of an endpoint:
// nothing of a real etcd (plain or TLS); a refused connection; a server
// that accepts and never answers, and a TLS etcd asked in plain HTTP,
// named as such; an HTTP server that is not etcd.
func TestDiagnose(t *testing.T) {
	t.Parallel()
	pki := testutil.NewTestPKI(t)
	plain := testutil.StartEtcd(t, testutil.EtcdOptions{})
	secure := testutil.StartEtcd(t, testutil.EtcdOptions{TLS: &transport.TLSInfo{
		CertFile: pki.ServerCert, KeyFile: pki.ServerKey, TrustedCAFile: pki.CAFile, ClientCertAuth: true}})
	silent := testutil.SilentListener(t)
	other := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(other.Close)
	refused, err := loopport.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	clientTLS := &config.EtcdTLS{CACert: pki.CAFile, ClientCert: pki.ClientCert, ClientKey: pki.ClientKey, ServerName: "localhost"}
	for _, tc := range []struct {
		name     string
		endpoint string
		tls      *config.EtcdTLS
		want     string // "" for no error
	}{
		{"etcd", plain.Endpoint, nil, ""},
		{"etcd over TLS", secure.Endpoint, clientTLS, ""},
		{"refused", "http://" + refused, nil, "connection refused"},
		{"silent", "http://" + silent, nil, "accepts connections but gave no answer within 2s: is it etcd, or does it expect TLS (https://)?"},
		{"TLS etcd asked in plain HTTP", strings.Replace(secure.Endpoint, "https://", "http://", 1), nil, "closed the connection without an answer: is it etcd, or does it expect TLS (https://)?"},
		{"not etcd", other.URL, nil, "answers, but not as etcd (GET /version: 404 Not Found)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := etcd.New(config.Etcd{Endpoints: []string{tc.endpoint}, TLS: tc.tls}, []string{"dynamo"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = s.Diagnose(context.Background())
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Diagnose = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Diagnose = %v, want %q", err, tc.want)
			}
		})
	}
}

package cmdutil

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/eventbus/agent"
)

// BusClientFlags are the flags of the event bus clients (broker,
// kv-listener): where the router's listener is, and the credential.
type BusClientFlags struct {
	Router         string
	ID             string
	TokenFile      string
	CertFile       string
	KeyFile        string
	CAFile         string
	MetricsAddress string
	DrainGrace     time.Duration
}

// DefaultBusMetricsAddress is where a bus client serves its metrics.
const DefaultBusMetricsAddress = ":9091"

// Register adds the flags to cmd.
func (o *BusClientFlags) Register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&o.Router, "router", "", "the router's event bus listener, https://HOST:PORT (dynamo.event_bus.listen)")
	fl.StringVar(&o.ID, "id", "", "this client's id: its dynamo.event_bus.brokers[].id")
	fl.StringVar(&o.TokenFile, "token-file", "", "file holding the bearer token whose SHA-256 is the entry's token_hash")
	fl.StringVar(&o.CertFile, "cert", "", "client certificate whose DNS SAN is --id (with --key; verified by tls.client_ca)")
	fl.StringVar(&o.KeyFile, "key", "", "key of --cert")
	fl.StringVar(&o.CAFile, "ca-file", "", "CA certificate that verifies the router's listener (default: the system roots)")
	fl.StringVar(&o.MetricsAddress, "metrics-address", DefaultBusMetricsAddress, "where to serve /metrics and /healthz (\"\" for nowhere)")
	fl.DurationVar(&o.DrainGrace, "drain-grace", agent.DefaultDrainGrace, "on SIGTERM, how long the router may take to move the streams away")
	_ = cmd.MarkFlagRequired("router")
	_ = cmd.MarkFlagRequired("id")
	_ = cmd.MarkFlagFilename("token-file")
	_ = cmd.MarkFlagFilename("cert", "pem", "crt")
	_ = cmd.MarkFlagFilename("key", "pem", "key")
	_ = cmd.MarkFlagFilename("ca-file", "pem", "crt")
}

// Check validates the flags' combination.
func (o *BusClientFlags) Check() error {
	switch {
	case o.TokenFile == "" && o.CertFile == "":
		return FlagErrorf("no credential: pass --token-file, or --cert and --key")
	case (o.CertFile == "") != (o.KeyFile == ""):
		return FlagErrorf("--cert and --key go together")
	case o.DrainGrace < 0:
		return FlagErrorf("--drain-grace must not be negative")
	}
	return nil
}

// Credentials reads the token, the client certificate and the CA the
// flags name. The token is returned, never printed. The certificate is
// read now, so that a missing or broken pair is a usage error, and again
// at each connection (CertFiles.Get).
func (o *BusClientFlags) Credentials() (token string, cert *CertFiles, roots *x509.CertPool, err error) {
	if o.TokenFile != "" {
		data, err := os.ReadFile(o.TokenFile)
		if err != nil {
			return "", nil, nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--token-file: %w", err)}
		}
		if token = strings.TrimSpace(string(data)); token == "" {
			return "", nil, nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--token-file %s is empty", o.TokenFile)}
		}
	}
	if o.CertFile != "" {
		cert = &CertFiles{certFile: o.CertFile, keyFile: o.KeyFile}
		if _, err := cert.Get(); err != nil {
			return "", nil, nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--cert, --key: %w", err)}
		}
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return "", nil, nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--ca-file: %w", err)}
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return "", nil, nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--ca-file %s: no PEM certificate", o.CAFile)}
		}
	}
	return token, cert, roots, nil
}

// CertFiles is a client certificate read from its files each time it is
// asked for (each TLS handshake of a long-running client, a rare event):
// one renewed in place (a Secret rotated by a certificate manager) is
// presented from the next connection. A pair that does not load (a
// renewal half written) gives the last one that did.
type CertFiles struct {
	certFile, keyFile string
	mu                sync.Mutex
	last              *tls.Certificate
}

// Get reads the pair, or returns the last one read when it does not load.
func (c *CertFiles) Get() (*tls.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if c.last != nil {
			return c.last, nil
		}
		return nil, err
	}
	c.last = &pair
	return c.last, nil
}

// Getter is Get, or nil when c is (no certificate).
func (c *CertFiles) Getter() func() (*tls.Certificate, error) {
	if c == nil {
		return nil
	}
	return c.Get
}

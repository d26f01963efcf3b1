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

// BusCredentials are a bus client's credential files, each read again
// when it is next needed (a Secret rotated in place is used from the next
// session or handshake on); a file that does not load then, such as one
// caught half written, gives the last value that did.
type BusCredentials struct {
	Token *FileValue[string]           // nil without --token-file
	Cert  *FileValue[*tls.Certificate] // nil without --cert
	Roots *FileValue[*x509.CertPool]   // nil without --ca-file: the system roots
}

// Credentials reads the token, the client certificate and the CA the
// flags name, now, so that a missing or broken file is a usage error, and
// returns them for reading again later. The token is never printed.
func (o *BusClientFlags) Credentials() (*BusCredentials, error) {
	var c BusCredentials
	var err error
	if o.TokenFile != "" {
		if c.Token, err = LoadFileValue(func() (string, error) { return readToken(o.TokenFile) }); err != nil {
			return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--token-file: %w", err)}
		}
	}
	if o.CertFile != "" {
		load := func() (*tls.Certificate, error) {
			pair, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
			return &pair, err
		}
		if c.Cert, err = LoadFileValue(load); err != nil {
			return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--cert, --key: %w", err)}
		}
	}
	if o.CAFile != "" {
		if c.Roots, err = LoadFileValue(func() (*x509.CertPool, error) { return readRoots(o.CAFile) }); err != nil {
			return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--ca-file: %w", err)}
		}
	}
	return &c, nil
}

// Apply sets the credentials on an event bus client's options: the token
// read at each session, the certificate and the roots at each handshake.
func (c *BusCredentials) Apply(o *agent.Options) {
	if c.Token != nil {
		o.GetToken = c.Token.Get
	}
	if c.Cert != nil {
		o.GetCertificate = func() (*tls.Certificate, error) { return c.Cert.Get(), nil }
	}
	if c.Roots != nil {
		o.GetRootCAs = c.Roots.Get
	}
}

func readToken(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("%s is empty", file)
	}
	return token, nil
}

func readRoots(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", file)
	}
	return roots, nil
}

// FileValue is a value parsed from files each time it is asked for (a
// rare event for a long-running client: a session, a TLS handshake), so
// that files renewed in place are used from then on; when they do not
// load, the last value that did is given.
type FileValue[T any] struct {
	load func() (T, error)
	mu   sync.Mutex
	last T
}

// LoadFileValue loads the value once, an error when it does not load.
func LoadFileValue[T any](load func() (T, error)) (*FileValue[T], error) {
	v, err := load()
	if err != nil {
		return nil, err
	}
	return &FileValue[T]{load: load, last: v}, nil
}

// Get loads the value again, or gives the last one loaded. Loads are one
// at a time, so a slow one cannot put back an older value.
func (f *FileValue[T]) Get() T {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, err := f.load(); err == nil {
		f.last = v
	}
	return f.last
}

package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPKI is a CA with a server and a client certificate, written as PEM
// files in a temp dir. The server certificate is valid for 127.0.0.1, ::1
// and localhost.
type TestPKI struct {
	CAFile, ServerCert, ServerKey, ClientCert, ClientKey string

	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

// NewTestPKI generates fresh keys and certificates for one test.
func NewTestPKI(t testing.TB) *TestPKI {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "continuum test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p := &TestPKI{CAFile: filepath.Join(dir, "ca.pem"), dir: dir, ca: ca, caKey: caKey, serial: 3}
	writePEM(t, p.CAFile, "CERTIFICATE", caDER)
	p.ServerCert, p.ServerKey = p.issue(t, "server", 2, x509.ExtKeyUsageServerAuth)
	p.ClientCert, p.ClientKey = p.issue(t, "client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

// issue writes a certificate for name (valid for 127.0.0.1, ::1, localhost
// and name) and its key into name.pem and name-key.pem, signed by the CA.
func (p *TestPKI) issue(t testing.TB, name string, serial int64, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: []string{"localhost", name}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
	}
	certFile, keyFile = filepath.Join(p.dir, name+".pem"), filepath.Join(p.dir, name+"-key.pem")
	p.sign(t, tmpl, key, certFile, keyFile)
	return certFile, keyFile
}

// sign writes tmpl signed by the CA into certFile and key into keyFile.
func (p *TestPKI) sign(t testing.TB, tmpl *x509.Certificate, key *ecdsa.PrivateKey, certFile, keyFile string) {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certFile, "CERTIFICATE", der)
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
}

// CopyFile copies from to to (mode 0600), as a certificate manager
// writing a renewed file over an old one does.
func CopyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// RenewServer replaces the server certificate and key in their files (a
// new key and serial, the same CA and names), as a certificate manager
// renewing a Secret does.
func (p *TestPKI) RenewServer(t testing.TB) {
	t.Helper()
	p.serial++
	p.issue(t, "server", p.serial, x509.ExtKeyUsageServerAuth)
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ClientFor issues a client certificate whose only DNS SAN is name (an
// event bus broker id), signed by the PKI's CA.
func (p *TestPKI) ClientFor(t testing.TB, name string) (certFile, keyFile string) {
	t.Helper()
	return p.ClientForNames(t, name)
}

// ClientForNames issues a client certificate whose DNS SANs are names (the
// first is also its common name), signed by the PKI's CA.
func (p *TestPKI) ClientForNames(t testing.TB, names ...string) (certFile, keyFile string) {
	t.Helper()
	p.serial++
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames: names,
	}
	certFile, keyFile = filepath.Join(p.dir, fmt.Sprintf("client-%d.pem", p.serial)), filepath.Join(p.dir, fmt.Sprintf("client-%d-key.pem", p.serial))
	p.sign(t, tmpl, key, certFile, keyFile)
	return certFile, keyFile
}

package cmdutil_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestCertFilesRenewedInPlace: the bus client's certificate is read from
// its files at each Get: a pair renewed in place is the next one given;
// a pair that does not load (a renewal half written) gives the last one
// that did; one that never loaded is a usage error at start.
func TestCertFilesRenewedInPlace(t *testing.T) {
	t.Parallel()
	pki := testutil.NewTestPKI(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c1, k1 := pki.ClientFor(t, "broker-a")
	testutil.CopyFile(t, c1, certFile)
	testutil.CopyFile(t, k1, keyFile)
	flags := cmdutil.BusClientFlags{CertFile: certFile, KeyFile: keyFile}
	_, cert, _, err := flags.Credentials()
	if err != nil {
		t.Fatal(err)
	}
	first, err := cert.Get()
	if err != nil {
		t.Fatal(err)
	}
	c2, k2 := pki.ClientFor(t, "broker-a")
	testutil.CopyFile(t, c2, certFile)
	testutil.CopyFile(t, k2, keyFile)
	renewed, err := cert.Get()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(renewed.Certificate[0], first.Certificate[0]) {
		t.Fatal("the pair renewed in place was not read")
	}
	if err := os.WriteFile(keyFile, []byte("half written"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := cert.Get(); err != nil || !bytes.Equal(got.Certificate[0], renewed.Certificate[0]) {
		t.Errorf("a pair that does not load: %v, want the renewed one kept", err)
	}
	if _, _, _, err := flags.Credentials(); err == nil {
		t.Error("a pair that does not load at start was accepted")
	}
}

package cmdutil_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
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
	creds, err := flags.Credentials()
	if err != nil {
		t.Fatal(err)
	}
	if creds.Token != nil || creds.Roots != nil {
		t.Fatalf("credentials not asked for: %+v", creds)
	}
	first := creds.Cert.Get()
	c2, k2 := pki.ClientFor(t, "broker-a")
	testutil.CopyFile(t, c2, certFile)
	testutil.CopyFile(t, k2, keyFile)
	renewed := creds.Cert.Get()
	if bytes.Equal(renewed.Certificate[0], first.Certificate[0]) {
		t.Fatal("the pair renewed in place was not read")
	}
	if err := os.WriteFile(keyFile, []byte("half written"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := creds.Cert.Get(); !bytes.Equal(got.Certificate[0], renewed.Certificate[0]) {
		t.Error("a pair that does not load: want the renewed one kept")
	}
	if _, err := flags.Credentials(); err == nil {
		t.Error("a pair that does not load at start was accepted")
	}
}

// TestTokenAndCARenewedInPlace: the token and the CA bundle are read
// again at each Get, the last good ones kept when a file does not load
// (empty, no PEM), and a file that does not load at start is a usage
// error.
func TestTokenAndCARenewedInPlace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	write := func(file, data string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(tokenFile, "first\n")
	testutil.CopyFile(t, testutil.NewTestPKI(t).CAFile, caFile)
	flags := cmdutil.BusClientFlags{TokenFile: tokenFile, CAFile: caFile}
	creds, err := flags.Credentials()
	if err != nil {
		t.Fatal(err)
	}
	if creds.Cert != nil || creds.Token.Get() != "first" {
		t.Fatalf("token %q", creds.Token.Get())
	}
	firstRoots := creds.Roots.Get()
	write(tokenFile, " second ")
	testutil.CopyFile(t, testutil.NewTestPKI(t).CAFile, caFile)
	renewedRoots := creds.Roots.Get()
	if creds.Token.Get() != "second" || renewedRoots.Equal(firstRoots) {
		t.Fatal("the token or the CA rewritten in place was not read")
	}
	write(tokenFile, "\n")
	write(caFile, "half written")
	if creds.Token.Get() != "second" || !creds.Roots.Get().Equal(renewedRoots) {
		t.Error("files that do not load: want the last good values kept")
	}
	if _, err := flags.Credentials(); err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Errorf("an empty token at start: %v", err)
	}
	write(tokenFile, "t")
	if _, err := flags.Credentials(); err == nil || !strings.Contains(err.Error(), "--ca-file") {
		t.Errorf("a CA file without PEM at start: %v", err)
	}
}

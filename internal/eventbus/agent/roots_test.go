package agent_test

import (
	"crypto/x509"
	"errors"
	"os"
)

func agentRoots(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("no certificate")
	}
	return pool, nil
}

package routerd

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/config"
)

// certificate is server.tls's certificate, served to every new TLS
// connection and reloaded when its files change (a renewed certificate, a
// Kubernetes Secret's symlink swap). A pair that does not load is logged
// and the previous one kept.
type certificate struct {
	files  config.ServerTLS
	logger *slog.Logger
	cur    atomic.Pointer[tls.Certificate]
	// mu orders the reloads of the file watch and of SIGHUP.
	mu sync.Mutex
	// pem is the content last loaded, to tell a change from a touch.
	pem []byte
}

// loadCertificate reads the pair now: a pair that does not load is an
// error naming the keys.
func loadCertificate(files config.ServerTLS, logger *slog.Logger) (*certificate, error) {
	c := &certificate{files: files, logger: logger}
	if err := c.load(); err != nil {
		return nil, fmt.Errorf("server.tls: %w", err)
	}
	return c, nil
}

func (c *certificate) load() error {
	pair, err := tls.LoadX509KeyPair(c.files.Cert, c.files.Key)
	if err != nil {
		return err
	}
	c.cur.Store(&pair)
	c.pem = bytes.Join(pair.Certificate, nil)
	return nil
}

// config is the TLS configuration of the listeners: TLS 1.2 or later,
// HTTP/2 offered before HTTP/1.1, the current certificate.
func (c *certificate) config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.cur.Load(), nil }}
}

// watchCertificate watches the pair's files (a variable, so that a test
// can have the watch fail as it does where inotify is out of watches).
var watchCertificate = newFileWatcher

// run reloads the pair when the certificate's or the key's file changes
// (their directories are watched), until ctx ends.
func (c *certificate) run(ctx context.Context) error {
	w, err := watchCertificate(newWatchedFiles(c.files.Cert, c.files.Key))
	if err != nil {
		c.logger.Warn("server.tls: the certificate files are not watched; renew a certificate with SIGHUP", "err", err)
		<-ctx.Done()
		return nil
	}
	defer func() { _ = w.Close() }()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.Changed():
			debounce.Reset(reloadDebounce)
		case err := <-w.Errors():
			c.logger.Warn("server.tls: watching the certificate files", "err", err)
		case <-debounce.C:
			w.Rewatch()
			c.reread("changed")
		}
	}
}

// reread loads the pair again (its files changed, or SIGHUP asked for it:
// the way to renew a certificate whose files are not watched); a pair
// that does not load is logged and the previous one kept.
func (c *certificate) reread(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.pem
	if err := c.load(); err != nil {
		c.logger.Error("server.tls: the "+why+" certificate does not load; the previous one is served", "cert", c.files.Cert, "err", err)
	} else if !bytes.Equal(prev, c.pem) {
		c.logger.Info("server.tls: certificate reloaded", "cert", c.files.Cert)
	}
}

// Package etcdembed runs an in-process etcd server on fixed loopback ports
// that can be stopped and started again with its data (an etcd restart).
// The fleet simulator registers workers in it; tests run discovery against
// it.
//
// Imports: loopport; only the simulator and tests use it.
package etcdembed

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/continuum-router/continuum/internal/loopport"
)

// Server is one single-member etcd cluster.
type Server struct {
	dir                string
	clientURL, peerURL url.URL
	tls                *transport.TLSInfo

	mu      sync.Mutex
	server  *embed.Etcd
	started bool // once it has run, clients know its ports: they stay
}

// New prepares a server with its data in dir on two free loopback ports;
// with tls, clients connect over TLS. Start runs it.
func New(dir string, tls *transport.TLSInfo) (*Server, error) {
	s := &Server{dir: dir, tls: tls}
	if err := s.pickPorts(); err != nil {
		return nil, err
	}
	return s, nil
}

// pickPorts chooses the client and peer ports. A port is only known free
// when it is asked for; someone else may bind it before etcd does, so the
// first Start picks again when that happens.
func (s *Server) pickPorts() error {
	cp, err := loopport.Free()
	if err != nil {
		return err
	}
	pp, err := loopport.Free()
	if err != nil {
		return err
	}
	scheme := "http"
	if s.tls != nil {
		scheme = "https"
	}
	s.clientURL = url.URL{Scheme: scheme, Host: fmt.Sprintf("127.0.0.1:%d", cp)}
	s.peerURL = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", pp)}
	return nil
}

// Endpoint is the client URL; the first Start may change it, later ones
// keep it.
func (s *Server) Endpoint() string { return s.clientURL.String() }

// Start runs the server (again, after Stop) and waits until it is ready.
func (s *Server) Start() error {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	var srv *embed.Etcd
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if srv, err = embed.StartEtcd(s.config()); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
		if !started {
			// Nobody knows the ports yet: take others rather than wait
			// for whoever holds these.
			if perr := s.pickPorts(); perr != nil {
				return perr
			}
			continue
		}
		time.Sleep(100 * time.Millisecond) // after a stop the port may linger in TIME_WAIT
	}
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		srv.Close()
		return errors.New("etcd did not become ready within 30 s")
	}
	s.mu.Lock()
	s.server = srv
	s.started = true
	s.mu.Unlock()
	return nil
}

func (s *Server) config() *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = "continuum"
	cfg.Dir = s.dir
	cfg.ListenClientUrls = []url.URL{s.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{s.clientURL}
	cfg.ListenPeerUrls = []url.URL{s.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{s.peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if s.tls != nil {
		cfg.ClientTLSInfo = *s.tls
	}
	return cfg
}

// Stop stops the server; Start brings it back with its data.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.server
	s.server = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Close()
		<-srv.Server.StopNotify()
	}
}

// Restart stops the server and starts it again: clients and watchers must
// reconnect; leases survive.
func (s *Server) Restart() error {
	s.Stop()
	return s.Start()
}

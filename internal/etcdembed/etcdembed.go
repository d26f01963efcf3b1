// Package etcdembed runs an in-process etcd server on fixed loopback ports
// that can be stopped and started again with its data (an etcd restart).
// The fleet simulator registers workers in it; tests run discovery against
// it.
//
// Imports: no internal package; only the simulator and tests use it.
package etcdembed

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is one single-member etcd cluster.
type Server struct {
	dir                string
	clientURL, peerURL url.URL
	tls                *transport.TLSInfo

	mu     sync.Mutex
	server *embed.Etcd
}

// New prepares a server with its data in dir on two free loopback ports;
// with tls, clients connect over TLS. Start runs it.
func New(dir string, tls *transport.TLSInfo) (*Server, error) {
	cp, err := freePort()
	if err != nil {
		return nil, err
	}
	pp, err := freePort()
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if tls != nil {
		scheme = "https"
	}
	return &Server{dir: dir, tls: tls,
		clientURL: url.URL{Scheme: scheme, Host: fmt.Sprintf("127.0.0.1:%d", cp)},
		peerURL:   url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", pp)}}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Endpoint is the client URL.
func (s *Server) Endpoint() string { return s.clientURL.String() }

// Start runs the server (again, after Stop) and waits until it is ready.
func (s *Server) Start() error {
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
	var srv *embed.Etcd
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if srv, err = embed.StartEtcd(cfg); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
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
	s.mu.Unlock()
	return nil
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

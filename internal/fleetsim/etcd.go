package fleetsim

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/continuum-router/continuum/internal/etcdembed"
)

// Store kinds: where the simulated workers register.
const (
	StoreFile = "file" // Dynamo's file store (DYN_FILE_KV layout)
	StoreEtcd = "etcd" // an in-process etcd server, records under 10 s leases
)

// etcdHandle prefixes a record handle kept in etcd rather than a file.
const etcdHandle = "etcd:"

// DefaultLeaseTTL is the workers' lease, as Dynamo's runtime grants it.
const DefaultLeaseTTL = 10 * time.Second

// LeaseTTLValid reports whether d may be the workers' lease TTL: whole
// seconds (etcd grants leases in seconds) from 2 s to an hour.
func LeaseTTLValid(d time.Duration) bool {
	return d >= 2*time.Second && d <= time.Hour && d%time.Second == 0
}

// simEtcd is the fleet's in-process etcd server and the workers' client.
type simEtcd struct {
	*etcdembed.Server
	client *clientv3.Client
	ttl    int64 // lease TTL in seconds
}

func startSimEtcd(dir string, ttl time.Duration) (*simEtcd, error) {
	srv, err := etcdembed.New(filepath.Join(dir, "etcd"), nil)
	if err != nil {
		return nil, err
	}
	if err := srv.Start(); err != nil {
		return nil, err
	}
	e := &simEtcd{Server: srv, ttl: int64(max(ttl.Round(time.Second), time.Second) / time.Second)}
	e.client, err = clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		srv.Stop()
		return nil, err
	}
	return e, nil
}

func (e *simEtcd) close() {
	if e.client != nil {
		_ = e.client.Close()
	}
	e.Stop()
}

// grant starts a worker's lease and keeps it alive until the returned
// cancel (a kill) or the fleet's end.
func (e *simEtcd) grant(ctx context.Context) (clientv3.LeaseID, context.CancelFunc, error) {
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := e.client.Grant(gctx, e.ttl)
	if err != nil {
		return 0, nil, fmt.Errorf("etcd lease: %w", err)
	}
	kctx, stop := context.WithCancel(ctx)
	ch, err := e.client.KeepAlive(kctx, l.ID)
	if err != nil {
		stop()
		return 0, nil, fmt.Errorf("etcd keep-alive: %w", err)
	}
	go func() {
		for range ch { // drain the acknowledgements
		}
	}()
	return l.ID, stop, nil
}

func (e *simEtcd) put(ctx context.Context, key string, val []byte, lease clientv3.LeaseID) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := e.client.Put(pctx, key, string(val), clientv3.WithLease(lease))
	return err
}

func (e *simEtcd) delete(ctx context.Context, key string) error {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := e.client.Delete(dctx, key)
	return err
}

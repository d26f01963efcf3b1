// Package etcd is the read-only etcd discovery source: per pass it range-gets
// Dynamo's three prefixes at one revision, then watches them from the next
// revision. It never writes, deletes, grants or keeps alive anything.
//
// Imports: discovery, config and wire.
package etcd

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// keepAlive probes the connection so that a silent server ends the pass.
const (
	keepAliveTime    = 10 * time.Second
	keepAliveTimeout = 10 * time.Second
	// revisionProbeEvery is how often a pass reads the store's revision
	// to learn whether the store went back (see probeRevision).
	revisionProbeEvery = 10 * time.Second
	// pageSize is the number of keys one range get returns at most.
	pageSize = 256
	// maxRecvBytes bounds one response: a page of records of at most
	// fleet.MaxRecordBytes each is refused by the reducer past that size
	// anyway, and etcd's own request limit is 1.5 MiB by default. A page
	// over it is asked for again in halves; a single value over it is
	// skipped by name (see skipOversized).
	maxRecvBytes = 64 << 20
)

// Source watches one etcd cluster for a set of Dynamo namespaces.
type Source struct {
	endpoints  []string
	namespaces []string
	// useTLS: the endpoints are https; tlsFiles names the CA and client
	// certificate, if any. The files are read again at each pass, so that
	// a certificate or CA renewed in place (a Secret rotated by a
	// certificate manager) is used from the next connection, instead of
	// the one read at start until it expires.
	useTLS   bool
	tlsFiles *config.EtcdTLS
	username string
	password string
	logger   *slog.Logger
	// recvLimit is the client's receive limit (maxRecvBytes; tests lower it).
	recvLimit int

	// afterSeed runs between the range get and opening the watches (tests).
	afterSeed func()
	// seedTimeout bounds a pass's connect, range get and watch creation
	// (discovery.SeedTimeout; tests shorten it).
	seedTimeout time.Duration
	// probeEvery is how often a pass checks the store's revision
	// (revisionProbeEvery; tests shorten it).
	probeEvery time.Duration
}

var _ discovery.Source = (*Source)(nil)

// New builds a source from configuration. TLS files are read here too, so
// a missing file is reported with its path before any pass starts.
func New(cfg config.Etcd, namespaces []string, logger *slog.Logger) (*Source, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcd: no endpoints")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Source{namespaces: namespaces, logger: logger, recvLimit: maxRecvBytes}
	useTLS := cfg.TLS != nil
	for _, e := range cfg.Endpoints {
		if strings.HasPrefix(strings.ToLower(e), "https://") {
			useTLS = true
		}
	}
	for _, e := range cfg.Endpoints {
		host := e
		if i := strings.Index(e, "://"); i >= 0 {
			host = e[i+3:]
		}
		scheme := "http://"
		if useTLS {
			scheme = "https://"
		}
		s.endpoints = append(s.endpoints, scheme+host)
	}
	if useTLS {
		if _, err := tlsConfig(cfg.TLS); err != nil {
			return nil, err
		}
		s.tlsFiles, s.useTLS = cfg.TLS, true
	}
	if cfg.Auth != nil {
		s.username, s.password = cfg.Auth.Username, cfg.Auth.Password
	}
	return s, nil
}

func tlsConfig(t *config.EtcdTLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if t == nil {
		return tc, nil
	}
	tc.ServerName = t.ServerName
	if t.CACert != "" {
		pem, err := os.ReadFile(t.CACert)
		if err != nil {
			return nil, fmt.Errorf("etcd tls.ca_cert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd tls.ca_cert %s: no PEM certificate in the file", t.CACert)
		}
		tc.RootCAs = pool
	}
	if t.ClientCert != "" || t.ClientKey != "" {
		cert, err := tls.LoadX509KeyPair(t.ClientCert, t.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("etcd tls.client_cert %s / client_key: %w", t.ClientCert, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Name implements discovery.Source.
func (s *Source) Name() string { return config.SourceEtcd }

func (s *Source) prefixes() []string {
	var out []string
	for _, ns := range s.namespaces {
		p := wire.WatchPrefixes(ns)
		out = append(out, p[:]...)
	}
	return out
}

// watched reports whether a key read under a watched prefix belongs to a
// watched namespace: a Dynamo 1.2 channel key of a namespace named
// "namespace" can sit under another namespace's scoped prefix.
func (s *Source) watched(key []byte) bool {
	return !bytes.HasPrefix(key, []byte(wire.PrefixEventChannels)) || wire.WatchedChannelKey(string(key), s.namespaces)
}

// Diagnose says why the endpoints may not answer: the first failure to
// open a TCP connection to one of them (refused, no route, a name that
// does not resolve); else, asked for etcd's version, the first that does
// not answer as etcd does (a server that accepts and never answers, one
// that expects TLS, something else at that address); nil when they all
// answer. A pass retries quietly until its seed timeout, so a command
// that gives up sooner asks this for the reason.
func (s *Source) Diagnose(ctx context.Context) error {
	var d net.Dialer
	for _, ep := range s.endpoints {
		u, err := url.Parse(ep)
		if err != nil {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, diagnoseTimeout)
		c, err := d.DialContext(dctx, "tcp", u.Host)
		cancel()
		if err != nil {
			return fmt.Errorf("etcd endpoint %s: %w", ep, err)
		}
		_ = c.Close()
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	if s.useTLS {
		tc, err := tlsConfig(s.tlsFiles)
		if err != nil {
			return err
		}
		tr.TLSClientConfig = tc
	}
	// One bound for all the version probes (the command waits for this
	// reason only): diagnoseTimeout, or what is left of ctx when less (a
	// command probing before its own timeout).
	budget := diagnoseTimeout
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, max(time.Until(dl), 0).Round(10*time.Millisecond))
	}
	vctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	hc := &http.Client{Transport: tr}
	for _, ep := range s.endpoints {
		if err := versionAnswer(vctx, hc, ep, budget); err != nil {
			return err
		}
	}
	return nil
}

// diagnoseTimeout bounds each of Diagnose's connection attempts, and its
// version probes together.
const diagnoseTimeout = 2 * time.Second

// versionAnswer asks ep for etcd's GET /version (served on the client
// port beside gRPC) and says how the answer is not etcd's, if it is not;
// budget is the time ctx gives it, for the message.
func versionAnswer(ctx context.Context, hc *http.Client, ep string, budget time.Duration) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep+"/version", nil)
	if err != nil {
		return fmt.Errorf("etcd endpoint %s: %w", ep, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		hint := "is it etcd, or does it expect TLS (https://)?"
		if strings.HasPrefix(ep, "https://") {
			hint = "is it etcd, and does it speak TLS?"
		}
		var ne net.Error
		switch {
		case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
			return fmt.Errorf("etcd endpoint %s accepts connections but gave no answer within %s: %s", ep, budget, hint)
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return fmt.Errorf("etcd endpoint %s closed the connection without an answer: %s", ep, hint)
		}
		return fmt.Errorf("etcd endpoint %s: %w", ep, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"etcdserver"`)) {
		return fmt.Errorf("etcd endpoint %s answers, but not as etcd (GET /version: %s)", ep, resp.Status)
	}
	return nil
}

// Run performs one pass: connect, range get, watch, stream. A pass that
// ran out of its seed timeout says why, when a probe of the endpoints
// finds out (refused, silent, not etcd): the timeout alone tells an
// operator nothing.
func (s *Source) Run(ctx context.Context, sink discovery.Sink) error {
	err := s.run(ctx, sink)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		if why := s.Diagnose(ctx); why != nil {
			err = fmt.Errorf("%w (%w)", err, why)
		}
	}
	return err
}

func (s *Source) run(ctx context.Context, sink discovery.Sink) error {
	var tc *tls.Config
	if s.useTLS {
		var err error
		if tc, err = tlsConfig(s.tlsFiles); err != nil {
			return err
		}
	}
	seedTimeout := discovery.SeedTimeout
	if s.seedTimeout > 0 {
		seedTimeout = s.seedTimeout
	}
	seedCtx, cancelSeed := context.WithTimeout(ctx, seedTimeout)
	defer cancelSeed()
	client, err := clientv3.New(clientv3.Config{
		Endpoints:            s.endpoints,
		DialTimeout:          seedTimeout,
		DialKeepAliveTime:    keepAliveTime,
		DialKeepAliveTimeout: keepAliveTimeout,
		TLS:                  tc,
		Username:             s.username,
		Password:             s.password,
		Context:              ctx,
		Logger:               zap.NewNop(),
		MaxCallRecvMsgSize:   s.recvLimit,
	})
	if err != nil {
		return fmt.Errorf("etcd connect %v: %w", s.endpoints, err)
	}
	defer func() { _ = client.Close() }()

	prefixes := s.prefixes()
	// Read every prefix at one revision, a page at a time, straight into
	// the reducer: memory is bounded by the page, not by the fleet.
	sink.ResyncBegin()
	var rev int64
	for _, p := range prefixes {
		end := clientv3.GetPrefixRangeEnd(p)
		from := p
		limit := int64(pageSize)
		for {
			opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(limit)}
			if rev != 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			resp, err := client.Get(seedCtx, from, opts...)
			if status.Code(err) == codes.ResourceExhausted {
				if limit > 1 {
					limit /= 2 // large records: smaller pages
					continue
				}
				// One value is larger than any response may be: every
				// pass would fail on it, so it is skipped by name.
				next, done, err := s.skipOversized(seedCtx, client, sink, from, end, &rev)
				if err != nil {
					return fmt.Errorf("etcd range get %q: %w", p, err)
				}
				if done {
					break
				}
				from = next
				continue
			}
			if err != nil {
				return fmt.Errorf("etcd range get %q: %w", p, err)
			}
			if rev == 0 {
				rev = resp.Header.Revision
			}
			limit = min(limit*2, pageSize) // back to full pages past large records
			for _, e := range resp.Kvs {
				if s.watched(e.Key) {
					sink.Put(string(e.Key), e.Value)
				}
			}
			if !resp.More || len(resp.Kvs) == 0 {
				break
			}
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	if s.afterSeed != nil {
		s.afterSeed()
	}

	watchCtx, cancelWatch := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancelWatch()
	type batch struct {
		resp clientv3.WatchResponse
		ok   bool
	}
	events := make(chan batch)
	chans := make([]clientv3.WatchChan, len(prefixes))
	for i, p := range prefixes {
		chans[i] = client.Watch(watchCtx, p, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithCreatedNotify())
	}
	// Wait until every watch is created, under the seed timeout.
	for i, ch := range chans {
		select {
		case resp, ok := <-ch:
			if !ok || resp.Err() != nil || !resp.Created {
				return fmt.Errorf("etcd watch %q from revision %d: %w", prefixes[i], rev+1, watchErr(resp, ok))
			}
		case <-seedCtx.Done():
			return fmt.Errorf("etcd watch %q: not created within %s: %w", prefixes[i], seedTimeout, seedCtx.Err())
		}
	}
	cancelSeed()
	sink.ResyncEnd()
	s.logger.Info("dynamo discovery seeded", "source", "etcd", "rev", rev, "namespaces", s.namespaces)

	for _, ch := range chans {
		go func(ch clientv3.WatchChan) {
			for {
				resp, ok := <-ch
				select {
				case events <- batch{resp, ok}:
				case <-watchCtx.Done():
					return
				}
				if !ok {
					return
				}
			}
		}(ch)
	}
	connLost := make(chan error, 1)
	go watchConnection(watchCtx, client, connLost)
	var seen atomic.Int64 // the newest revision the pass has read
	seen.Store(rev)
	every := s.probeEvery
	if every <= 0 {
		every = revisionProbeEvery
	}
	go probeRevision(watchCtx, client, prefixes[0], &seen, every, connLost)

	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-connLost:
			return err
		case b := <-events:
			if !b.ok || b.resp.Canceled || b.resp.Err() != nil {
				return fmt.Errorf("etcd watch ended: %w", watchErr(b.resp, b.ok))
			}
			if r := b.resp.Header.Revision; r > seen.Load() {
				seen.Store(r)
			}
			for _, ev := range b.resp.Events {
				if !s.watched(ev.Kv.Key) {
					continue
				}
				switch ev.Type {
				case clientv3.EventTypePut:
					sink.Put(string(ev.Kv.Key), ev.Kv.Value)
				case clientv3.EventTypeDelete:
					sink.Delete(string(ev.Kv.Key))
				}
			}
			sink.Flush()
		}
	}
}

// skipOversized handles a range whose first value alone is over the
// client's receive limit: it reads that key without its value, hands it to
// the sink as oversized (when the sink holds such keys) and returns where
// the range goes on. done is true when the range holds no key any more.
// The value is never read, so the keys-only read is the only way to learn
// which key it is; a watch event carrying such a value ends the pass, and
// the next pass's read skips it here.
func (s *Source) skipOversized(ctx context.Context, client *clientv3.Client, sink discovery.Sink, from, end string, rev *int64) (next string, done bool, err error) {
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(1), clientv3.WithKeysOnly()}
	if *rev != 0 {
		opts = append(opts, clientv3.WithRev(*rev))
	}
	resp, err := client.Get(ctx, from, opts...)
	if err != nil {
		return "", false, err
	}
	if *rev == 0 {
		// The read that failed had no revision, so the key it failed on
		// may be gone by now: read again at this revision, and skip the
		// key only if that fails too.
		*rev = resp.Header.Revision
		return from, false, nil
	}
	if len(resp.Kvs) == 0 {
		return "", true, nil
	}
	key := resp.Kvs[0].Key
	if s.watched(key) {
		if o, ok := sink.(discovery.OversizedSink); ok {
			o.PutOversized(string(key), s.recvLimit)
		}
	}
	return string(key) + "\x00", false, nil
}

func watchErr(resp clientv3.WatchResponse, ok bool) error {
	switch {
	case !ok:
		return errors.New("watch channel closed")
	case resp.CompactRevision != 0:
		return fmt.Errorf("revision compacted (compact revision %d)", resp.CompactRevision)
	case resp.Err() != nil:
		return resp.Err()
	case resp.Canceled:
		return fmt.Errorf("watch canceled: %s", resp.CancelReason)
	}
	return errors.New("watch not created")
}

// watchConnection ends the pass when the client's connection is lost, so
// a stopped server leads to a full resync rather than a silent resume:
// the connection failing, or leaving READY at all (a connection closed and
// made again at once goes through IDLE and CONNECTING, and the client
// would resume its watches on the new one unnoticed).
//
// A change away from READY counts even when the connection is READY again
// by the time its state is read: a blip can pass through IDLE and
// CONNECTING back to READY before this goroutine runs again. It starts once
// the pass's watches are open, on a connection then READY: a first state
// other than READY is a blip between the two.
func watchConnection(ctx context.Context, client *clientv3.Client, lost chan<- error) {
	conn := client.ActiveConnection()
	var err error
	if state := conn.GetState(); state != connectivity.Ready {
		err = fmt.Errorf("etcd connection %s once the watches opened", state)
	} else if conn.WaitForStateChange(ctx, connectivity.Ready) {
		err = fmt.Errorf("etcd connection left READY (now %s)", conn.GetState())
	} else {
		return // the pass ended
	}
	select {
	case lost <- err:
	default:
	}
}

// probeRevision ends the pass when the store's revision is below the
// newest the pass has read: the store went back (a member restarted with
// its data wiped, or restored from an older snapshot), and a watch
// resumed there waits for revisions that will not come for a long time,
// or brings a different history under them. A connection kept up by a
// proxy in between (a service mesh's sidecar, an L4 balancer that retries
// its upstream) hides such a restart from the connection's state. The
// read is one key without its value, linearizable (the leader's revision,
// not a lagging member's); a failed read is the connection's watch's to
// judge.
func probeRevision(ctx context.Context, client *clientv3.Client, prefix string, seen *atomic.Int64, every time.Duration, lost chan<- error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The newest revision read before the read starts: a linearizable
		// read sees at least that. One a watch delivers while the read
		// runs may be newer than its answer (etcd tells watchers of a
		// write before reads see it), which is no store gone back.
		before := seen.Load()
		pctx, cancel := context.WithTimeout(ctx, keepAliveTimeout)
		resp, err := client.Get(pctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
		cancel()
		if err != nil {
			continue
		}
		if r, s := resp.Header.Revision, before; r < s {
			select {
			case lost <- fmt.Errorf("etcd revision %d is below %d, read before: the store went back (wiped or restored)", r, s):
			default:
			}
			return
		}
	}
}

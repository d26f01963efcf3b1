package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
)

// Bounds of the metadata source: list page sizes, and caps on the resources
// held and on their bytes. Resources past a cap are refused and counted
// malformed; EndpointSlices past theirs are ignored, with a warning.
const (
	DWMPageSize   = 32
	MaxDWMs       = 16384
	SlicePageSize = 500
	MaxSlices     = 16384
	// MaxRecordBytes bounds the records held over all resources.
	MaxRecordBytes = 256 << 20
	// maxWatchEventBytes bounds one DWM watch event: a resource is an etcd
	// object, at most a few MiB; the reducer refuses records past 16 MiB.
	maxWatchEventBytes = 64 << 20
)

// MetadataSource is the `kubernetes` source: DynamoWorkerMetadata
// resources joined with EndpointSlice readiness, turned into the same
// etcd-shaped events as the etcd source, for the one reducer.
type MetadataSource struct {
	Client     ClientOptions
	Namespace  string
	Namespaces []string // Dynamo namespaces
	Timing     Timing
	Logger     *slog.Logger

	// kept holds each resource's last valid records from one pass to the
	// next, by name (within the join's caps): a resource read malformed in
	// a re-list under the same uid keeps supplying them, so a transient bad
	// write does not make its worker disappear at the next watch end.
	// Passes run one at a time, for the life of the watcher.
	kept map[string]lastValid
	// calls bounds the requests of each pass's seed phase.
	calls seedCalls
}

var _ discovery.Source = (*MetadataSource)(nil)

// NewMetadata builds the source from configuration.
func NewMetadata(k config.Kubernetes, namespaces []string, client ClientOptions, logger *slog.Logger) *MetadataSource {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &MetadataSource{Client: client, Namespace: k.Namespace, Namespaces: namespaces, Timing: DefaultTiming, Logger: logger}
}

// Name implements discovery.Source.
func (s *MetadataSource) Name() string { return config.SourceKubernetes }

// Run implements discovery.Source: list both resources, open both watches,
// publish, then follow both until either ends.
func (s *MetadataSource) Run(ctx context.Context, sink discovery.Sink) error {
	deadline := time.Now().Add(s.Timing.Seed)
	seedCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	rc, cs, err := connect(s.Client)
	if err != nil {
		return err
	}
	dwms, err := newDWMClient(rc, s.Namespace)
	if err != nil {
		return err
	}
	slices := cs.DiscoveryV1().EndpointSlices(s.Namespace)
	st := newJoin(s.Namespaces, s.Logger)
	st.carried = s.kept
	defer func() { s.kept = st.lastValid() }()

	dwmRV, err := listDWMs(seedCtx, &s.calls, s.Timing.Seed, dwms.list, st)
	if err != nil {
		return fmt.Errorf("listing dynamoworkermetadatas in %s: %w", s.Namespace, err)
	}
	listSlices := func(ctx context.Context, o metav1.ListOptions) ([]discoveryv1.EndpointSlice, metav1.ListMeta, error) {
		l, err := slices.List(ctx, o)
		if err != nil {
			return nil, metav1.ListMeta{}, err
		}
		return l.Items, l.ListMeta, nil
	}
	sliceRV, cut, err := listAll(seedCtx, &s.calls, s.Timing.Seed, listSlices, discoverySelector, SlicePageSize, MaxSlices, func(es *discoveryv1.EndpointSlice) { st.applySlice(es, false) })
	if err != nil {
		return fmt.Errorf("listing endpointslices in %s: %w", s.Namespace, err)
	}
	if cut {
		s.Logger.Warn("dynamo metadata discovery: too many EndpointSlices; the rest are ignored", "max", MaxSlices)
	}
	dw, err := openWatch(ctx, seedCtx, &s.calls, dwms.watch, "", dwmRV, s.Timing)
	if err != nil {
		return fmt.Errorf("watching dynamoworkermetadatas in %s: %w", s.Namespace, err)
	}
	dStream := newStream("dynamoworkermetadatas", dw, s.Timing)
	defer dStream.stop()
	sw, err := openWatch(ctx, seedCtx, &s.calls, slices.Watch, discoverySelector, sliceRV, s.Timing)
	if err != nil {
		return fmt.Errorf("watching endpointslices in %s: %w", s.Namespace, err)
	}
	sStream := newStream("endpointslices", sw, s.Timing)
	defer sStream.stop()

	sink.ResyncBegin()
	st.publishAll(sink)
	sink.ResyncEnd()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-dStream.timer.C:
			return dStream.idleErr()
		case <-sStream.timer.C:
			return sStream.idleErr()
		case ev, ok := <-dw.ResultChan():
			typ, obj, err := dStream.receive(ev, ok)
			if err != nil {
				return err
			}
			if obj == nil {
				continue
			}
			raw, ok := obj.(*rawObject)
			if !ok {
				return fmt.Errorf("dynamoworkermetadatas watch: unexpected %T", obj)
			}
			st.applyDWM(raw.raw, typ == watch.Deleted)
			st.flush(sink)
		case ev, ok := <-sw.ResultChan():
			typ, obj, err := sStream.receive(ev, ok)
			if err != nil {
				return err
			}
			if obj == nil {
				continue
			}
			es, ok := obj.(*discoveryv1.EndpointSlice)
			if !ok {
				return fmt.Errorf("endpointslices watch: unexpected %T", obj)
			}
			st.applySlice(es, typ == watch.Deleted)
			st.flush(sink)
		}
	}
}

// listDWMs reads every DynamoWorkerMetadata resource into the join and
// returns the list's resourceVersion. Every item reaches the join, past
// MaxDWMs too: the join refuses those past its caps and counts them under
// its over-capacity refusal, where stopping the list would drop them
// unseen. Each page is bounded, and the join keeps no refused resource.
func listDWMs(ctx context.Context, c *seedCalls, seed time.Duration, list lister[json.RawMessage], st *join) (string, error) {
	rv, _, err := listAll(ctx, c, seed, list, "", DWMPageSize, math.MaxInt, func(raw *json.RawMessage) { st.applyDWM(*raw, false) })
	if err != nil {
		return "", err
	}
	st.listed()
	return rv, nil
}

// DWMGroup, DWMVersion and DWMResource name the CRD.
const (
	DWMGroup    = "nvidia.com"
	DWMVersion  = "v1alpha1"
	DWMResource = "dynamoworkermetadatas"
)

// dwmClient lists and watches DynamoWorkerMetadata resources as raw JSON
// over the client's authenticated transport, so records reach the reducer
// byte for byte as the workers wrote them.
type dwmClient struct {
	http *http.Client
	base string
}

func newDWMClient(c *rest.Config, namespace string) (*dwmClient, error) {
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	host := strings.TrimSuffix(c.Host, "/")
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	return &dwmClient{http: hc, base: host + "/apis/" + DWMGroup + "/" + DWMVersion + "/namespaces/" + url.PathEscape(namespace) + "/" + DWMResource}, nil
}

func (c *dwmClient) get(ctx context.Context, o metav1.ListOptions) (*http.Response, error) {
	q := url.Values{}
	if o.LabelSelector != "" {
		q.Set("labelSelector", o.LabelSelector)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.FormatInt(o.Limit, 10))
	}
	if o.Continue != "" {
		q.Set("continue", o.Continue)
	}
	if o.ResourceVersion != "" {
		q.Set("resourceVersion", o.ResourceVersion)
	}
	if o.Watch {
		q.Set("watch", "true")
		q.Set("allowWatchBookmarks", strconv.FormatBool(o.AllowWatchBookmarks))
	}
	if o.TimeoutSeconds != nil {
		q.Set("timeoutSeconds", strconv.FormatInt(*o.TimeoutSeconds, 10))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var st metav1.Status
		if json.Unmarshal(b, &st) == nil && st.Code != 0 {
			return nil, &apierrors.StatusError{ErrStatus: st}
		}
		if resp.StatusCode == http.StatusNotFound {
			// The API server answers a resource it does not serve with a
			// bare 404 page, not a Status: the CRD is not installed (or
			// not at this version). Retried as any failure: it may be
			// installed later.
			return nil, fmt.Errorf("%s: the API server does not serve %s.%s/%s (is Dynamo's DynamoWorkerMetadata CRD installed?)", resp.Status, DWMResource, DWMGroup, DWMVersion)
		}
		return nil, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return resp, nil
}

type dwmList struct {
	Metadata metav1.ListMeta   `json:"metadata"`
	Items    []json.RawMessage `json:"items"`
}

func (c *dwmClient) list(ctx context.Context, o metav1.ListOptions) ([]json.RawMessage, metav1.ListMeta, error) {
	resp, err := c.get(ctx, o)
	if err != nil {
		return nil, metav1.ListMeta{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	// A page holds at most DWMPageSize resources of at most
	// maxWatchEventBytes each, and no more than the source holds in all
	// (MaxRecordBytes) and one resource: a larger page could not be held
	// anyway.
	var l dwmList
	if err := json.NewDecoder(io.LimitReader(resp.Body, min(DWMPageSize*maxWatchEventBytes, MaxRecordBytes+maxWatchEventBytes))).Decode(&l); err != nil {
		return nil, metav1.ListMeta{}, fmt.Errorf("decoding the list: %w", err)
	}
	return l.Items, l.Metadata, nil
}

func (c *dwmClient) watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	ctx, cancel := context.WithCancel(ctx)
	resp, err := c.get(ctx, o) //nolint:bodyclose // rawWatch.read closes it
	if err != nil {
		cancel()
		return nil, err
	}
	w := &rawWatch{ch: make(chan watch.Event), ctx: ctx, cancel: cancel, done: make(chan struct{}), limit: maxWatchEventBytes}
	go w.read(resp.Body)
	return w, nil
}

// rawObject carries one watch event's object as JSON.
type rawObject struct {
	metav1.TypeMeta
	raw json.RawMessage
}

func (o *rawObject) DeepCopyObject() runtime.Object { return &rawObject{raw: bytes.Clone(o.raw)} }

// rawWatch decodes a JSON watch stream into events with raw objects.
type rawWatch struct {
	ch     chan watch.Event
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// limit bounds the bytes read for one event (maxWatchEventBytes when
	// not set).
	limit int
}

func (w *rawWatch) Stop() {
	w.cancel()
	<-w.done
}

func (w *rawWatch) ResultChan() <-chan watch.Event { return w.ch }

func (w *rawWatch) read(body io.ReadCloser) {
	defer close(w.done)
	defer close(w.ch)
	defer func() { _ = body.Close() }()
	limit := w.limit
	if limit <= 0 {
		limit = maxWatchEventBytes
	}
	cr := &countingReader{r: body, limit: limit}
	dec := json.NewDecoder(cr)
	for {
		var ev struct {
			Type   watch.EventType `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			// EOF (the server's end), a cut connection, Stop, or an event
			// that is not JSON or is past the bound: all but the first
			// end the stream as a failure.
			if end := watchEndOf(w.ctx); end != nil {
				end.set(err)
			}
			return
		}
		cr.n = 0
		out := watch.Event{Type: ev.Type}
		if ev.Type == watch.Error {
			st := &metav1.Status{}
			if err := json.Unmarshal(ev.Object, st); err != nil {
				st = &metav1.Status{Status: metav1.StatusFailure, Message: "undecodable error event"}
			}
			out.Object = st
		} else {
			out.Object = &rawObject{raw: ev.Object}
		}
		select {
		case w.ch <- out:
		case <-w.ctx.Done():
			return
		}
	}
}

// countingReader fails once more than limit bytes were read since n was
// last reset: one event may not grow the decoder's buffer without bound.
type countingReader struct {
	r     io.Reader
	n     int
	limit int
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n >= c.limit {
		return 0, fmt.Errorf("a watch event larger than %d bytes", c.limit)
	}
	p = p[:min(len(p), c.limit-c.n)]
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

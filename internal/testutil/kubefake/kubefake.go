// Package kubefake is a fake Kubernetes API server over real HTTP for the
// discovery sources' tests. It speaks the real list/watch protocol for the
// resources those sources read: resourceVersion, limit/continue pagination,
// label selectors, chunked JSON watch streams, timeoutSeconds, bookmarks,
// 410 Gone after compaction, and can hang a stream to trip an idle
// deadline. The real client-go drives it; it is a fault injector beside the
// real kube-apiserver, not a client-side fake.
package kubefake

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Resource is one served collection.
type Resource struct {
	Group, Version, Plural, Kind string
}

// The resources the sources read.
var (
	Pods           = Resource{"", "v1", "pods", "Pod"}
	EndpointSlices = Resource{"discovery.k8s.io", "v1", "endpointslices", "EndpointSlice"}
	DWMs           = Resource{"nvidia.com", "v1alpha1", "dynamoworkermetadatas", "DynamoWorkerMetadata"}
)

func (r Resource) apiVersion() string {
	if r.Group == "" {
		return r.Version
	}
	return r.Group + "/" + r.Version
}

// Object is a resource as JSON.
type Object = map[string]any

type event struct {
	rv      uint64
	typ     string
	obj     Object
	old     Object // the previous state, for selector transitions
	ns, res string
}

// Server is the fake API server.
type Server struct {
	t   testing.TB
	srv *httptest.Server

	mu        sync.Mutex
	rv        uint64
	compacted uint64
	objects   map[Resource]map[string]Object // key ns/name
	history   []event
	changed   chan struct{} // closed and replaced on every change
	expire    chan struct{} // closed to end every open watch normally
	expireGen uint64        // counts ExpireWatches calls
	goneGen   uint64        // counts Gone calls
	hang      bool
	holdOpen  bool                // watch requests get no response headers
	ends      map[string]WatchEnd // by resource: how a watch ends at its timeoutSeconds
	requests  []string
	watches   int
	unserved  map[Resource]bool // answered as a resource the server does not serve
}

// Start serves a fake API server over plain HTTP until the test ends.
func Start(t testing.TB) *Server { return start(t, false) }

// StartTLS serves the fake API server over HTTPS, with a certificate the
// kubeconfigs it writes trust. client-go applies a kubeconfig user's
// credentials (tokens, exec plugins) only to TLS connections, so a test of
// credentials needs this one.
func StartTLS(t testing.TB) *Server { return start(t, true) }

func start(t testing.TB, useTLS bool) *Server {
	s := &Server{t: t, rv: 100, objects: map[Resource]map[string]Object{}, changed: make(chan struct{}), expire: make(chan struct{})}
	if useTLS {
		s.srv = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	} else {
		s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	}
	t.Cleanup(func() {
		s.mu.Lock()
		close(s.expire)
		s.expire = make(chan struct{})
		s.mu.Unlock()
		s.srv.Close()
	})
	return s
}

// URL is the server's address.
func (s *Server) URL() string { return s.srv.URL }

// WriteKubeconfig writes a kubeconfig for the server and returns its path.
func (s *Server) WriteKubeconfig(t testing.TB) string {
	return s.writeKubeconfig(t, "{token: fake-token}")
}

// WriteExecKubeconfig writes a kubeconfig whose user's token comes from the
// exec credential plugin command (client.authentication.k8s.io/v1) and
// returns its path.
func (s *Server) WriteExecKubeconfig(t testing.TB, command string) string {
	return s.writeKubeconfig(t, fmt.Sprintf("{exec: {apiVersion: client.authentication.k8s.io/v1, command: %q}}", command))
}

func (s *Server) writeKubeconfig(t testing.TB, user string) string {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cluster := fmt.Sprintf("{server: %q}", s.srv.URL)
	if c := s.srv.Certificate(); c != nil {
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
		cluster = fmt.Sprintf("{server: %q, certificate-authority-data: %s}", s.srv.URL, base64.StdEncoding.EncodeToString(ca))
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: %s
users:
- name: fake
  user: %s
contexts:
- name: fake
  context: {cluster: fake, user: fake}
current-context: fake
`, cluster, user)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Apply creates or replaces an object (metadata.namespace and name set).
func (s *Server) Apply(r Resource, obj Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	meta := metaOf(obj)
	key := meta["namespace"].(string) + "/" + meta["name"].(string)
	set := s.objects[r]
	if set == nil {
		set = map[string]Object{}
		s.objects[r] = set
	}
	old := set[key]
	s.rv++
	obj = clone(obj)
	obj["apiVersion"], obj["kind"] = r.apiVersion(), r.Kind
	m := metaOf(obj)
	m["resourceVersion"] = strconv.FormatUint(s.rv, 10)
	if _, ok := m["uid"]; !ok {
		if old != nil {
			m["uid"] = metaOf(old)["uid"]
		} else {
			m["uid"] = fmt.Sprintf("uid-%d", s.rv)
		}
	}
	set[key] = obj
	typ := "MODIFIED"
	if old == nil {
		typ = "ADDED"
	}
	s.record(event{rv: s.rv, typ: typ, obj: obj, old: old, ns: m["namespace"].(string), res: r.Plural})
}

// Delete removes an object.
func (s *Server) Delete(r Resource, namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := namespace + "/" + name
	old, ok := s.objects[r][key]
	if !ok {
		return
	}
	delete(s.objects[r], key)
	s.rv++
	obj := clone(old)
	metaOf(obj)["resourceVersion"] = strconv.FormatUint(s.rv, 10)
	s.record(event{rv: s.rv, typ: "DELETED", obj: obj, old: old, ns: namespace, res: r.Plural})
}

func (s *Server) record(e event) {
	s.history = append(s.history, e)
	close(s.changed)
	s.changed = make(chan struct{})
}

// Compact drops the event history: watches and continue tokens from
// before now are answered with 410 Gone.
func (s *Server) Compact() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compacted = s.rv
	s.history = nil
}

// ExpireWatches ends every open watch as the server does at timeoutSeconds.
func (s *Server) ExpireWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.expire)
	s.expire = make(chan struct{})
	s.expireGen++
}

// Gone answers every open watch with a 410 Gone ERROR event and ends it,
// as the server does when a watch falls behind a compaction.
func (s *Server) Gone() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.goneGen++
	close(s.changed)
	s.changed = make(chan struct{})
}

// Hang makes open and new watch streams send nothing (the connection
// stays open), as a half-open connection would.
func (s *Server) Hang(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang = on
	close(s.changed)
	s.changed = make(chan struct{})
}

// HoldWatchOpen makes new watch requests wait without response headers
// until it is turned off, as an overloaded server or a proxy would: the
// client's watch call does not return.
func (s *Server) HoldWatchOpen(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holdOpen = on
	close(s.changed)
	s.changed = make(chan struct{})
}

// Unserve makes the server answer r's paths as a real API server answers a
// resource it does not serve (its CRD not installed): a bare 404 page,
// not a Status.
func (s *Server) Unserve(r Resource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unserved == nil {
		s.unserved = map[Resource]bool{}
	}
	s.unserved[r] = true
}

// WatchEnd is how a watch that reaches its timeoutSeconds ends.
type WatchEnd int

const (
	// EndNormal ends the response cleanly, as the API server does.
	EndNormal WatchEnd = iota
	// EndCut drops the connection without ending the response, as a cut
	// connection or a proxy dropping it would.
	EndCut
	// EndGarbage sends bytes that are no watch event, then ends the
	// response cleanly.
	EndGarbage
	// EndNever keeps the watch open past its timeoutSeconds.
	EndNever
)

// SetWatchEnd sets how watches of r that reach their timeoutSeconds end
// from now on, open ones included.
func (s *Server) SetWatchEnd(r Resource, e WatchEnd) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ends == nil {
		s.ends = map[string]WatchEnd{}
	}
	s.ends[r.Plural] = e
}

// Watches is how many watch requests were served.
func (s *Server) Watches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watches
}

// Requests returns the request lines served so far.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

func (s *Server) serve(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, req.Method+" "+req.URL.RequestURI())
	s.mu.Unlock()
	r, ns, ok := route(req.URL.Path)
	if !ok || req.Method != http.MethodGet {
		status(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
		return
	}
	s.mu.Lock()
	unserved := s.unserved[r]
	s.mu.Unlock()
	if unserved {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, "404 page not found\n")
		return
	}
	q := req.URL.Query()
	sel, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		status(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	if q.Get("watch") == "true" || q.Get("watch") == "1" {
		s.watch(w, req, r, ns, sel)
		return
	}
	s.list(w, q, r, ns, sel)
}

// route parses /api/v1/namespaces/NS/PLURAL and
// /apis/GROUP/VERSION/namespaces/NS/PLURAL.
func route(path string) (Resource, string, bool) {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	for _, r := range []Resource{Pods, EndpointSlices, DWMs} {
		var want []string
		if r.Group == "" {
			want = []string{"api", r.Version, "namespaces", "*", r.Plural}
		} else {
			want = []string{"apis", r.Group, r.Version, "namespaces", "*", r.Plural}
		}
		if len(seg) != len(want) {
			continue
		}
		match := true
		for i := range want {
			if want[i] != "*" && want[i] != seg[i] {
				match = false
			}
		}
		if match {
			return r, seg[len(seg)-2], true
		}
	}
	return Resource{}, "", false
}

func (s *Server) list(w http.ResponseWriter, q map[string][]string, r Resource, ns string, sel labels.Selector) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	s.mu.Lock()
	rv, after := s.rv, ""
	if c := get("continue"); c != "" {
		b, err := base64.RawURLEncoding.DecodeString(c)
		parts := strings.SplitN(string(b), "/", 2)
		if err != nil || len(parts) != 2 {
			s.mu.Unlock()
			status(w, http.StatusBadRequest, "BadRequest", "invalid continue token")
			return
		}
		crv, _ := strconv.ParseUint(parts[0], 10, 64)
		if crv < s.compacted {
			s.mu.Unlock()
			status(w, http.StatusGone, "Expired", "The provided continue parameter is too old to display a consistent list result.")
			return
		}
		rv, after = crv, parts[1]
	}
	var names []string
	for key, obj := range s.objects[r] {
		if metaOf(obj)["namespace"] == ns && sel.Matches(labels.Set(labelsOf(obj))) && key > ns+"/"+after {
			names = append(names, key)
		}
	}
	slices.Sort(names)
	limit, _ := strconv.Atoi(get("limit"))
	cont := ""
	if limit > 0 && len(names) > limit {
		names = names[:limit]
		last := names[limit-1]
		cont = base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatUint(rv, 10) + "/" + strings.TrimPrefix(last, ns+"/")))
	}
	items := make([]Object, 0, len(names))
	for _, n := range names {
		items = append(items, s.objects[r][n])
	}
	s.mu.Unlock()
	meta := Object{"resourceVersion": strconv.FormatUint(rv, 10)}
	if cont != "" {
		meta["continue"] = cont
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(Object{"apiVersion": r.apiVersion(), "kind": r.Kind + "List", "metadata": meta, "items": items})
}

func (s *Server) watch(w http.ResponseWriter, req *http.Request, r Resource, ns string, sel labels.Selector) {
	q := req.URL.Query()
	from, _ := strconv.ParseUint(q.Get("resourceVersion"), 10, 64)
	var timeout <-chan time.Time
	if secs, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && secs > 0 {
		timeout = time.After(time.Duration(secs) * time.Second)
	}
	bookmarks := q.Get("allowWatchBookmarks") == "true"
	for {
		s.mu.Lock()
		hold, changed := s.holdOpen, s.changed
		s.mu.Unlock()
		if !hold {
			break
		}
		select {
		case <-changed:
		case <-req.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	flusher.Flush()
	enc := json.NewEncoder(w)
	send := func(typ string, obj Object) bool {
		if err := enc.Encode(Object{"type": typ, "object": obj}); err != nil {
			return false
		}
		flusher.Flush()
		return true
	}
	s.mu.Lock()
	s.watches++
	gen, gone := s.expireGen, s.goneGen
	compacted := s.compacted
	s.mu.Unlock()
	tooOld := func() {
		send("ERROR", Object{"kind": "Status", "apiVersion": "v1", "metadata": Object{}, "status": "Failure",
			"message": fmt.Sprintf("too old resource version: %d (%d)", from, compacted), "reason": "Expired", "code": 410})
	}
	if from < compacted {
		tooOld()
		return
	}
	next := from
	for {
		s.mu.Lock()
		var out []event
		if !s.hang {
			for _, e := range s.history {
				if e.rv > next && e.res == r.Plural && e.ns == ns {
					out = append(out, e)
				}
			}
		}
		changed, expire, rv, hang := s.changed, s.expire, s.rv, s.hang
		expired, isGone := s.expireGen != gen, s.goneGen != gone
		compacted = s.rv
		s.mu.Unlock()
		if isGone {
			tooOld()
			return
		}
		if expired {
			return
		}
		for _, e := range out {
			next = e.rv
			now := e.typ != "DELETED" && sel.Matches(labels.Set(labelsOf(e.obj)))
			was := e.old != nil && sel.Matches(labels.Set(labelsOf(e.old)))
			typ := e.typ
			switch {
			case e.typ == "DELETED" && !was:
				continue
			case e.typ != "DELETED" && now && !was:
				typ = "ADDED"
			case e.typ != "DELETED" && !now && was:
				typ = "DELETED" // left the selector
			case e.typ != "DELETED" && !now:
				continue
			}
			if !send(typ, e.obj) {
				return
			}
		}
		if bookmarks && !hang && len(out) == 0 && next < rv {
			next = rv
			if !send("BOOKMARK", Object{"apiVersion": r.apiVersion(), "kind": r.Kind, "metadata": Object{"resourceVersion": strconv.FormatUint(rv, 10)}}) {
				return
			}
		}
		select {
		case <-changed:
		case <-expire:
			return
		case <-timeout:
			s.mu.Lock()
			end := s.ends[r.Plural]
			s.mu.Unlock()
			switch end {
			case EndNever:
				timeout = nil
				continue
			case EndCut:
				panic(http.ErrAbortHandler) // net/http closes the connection mid-response
			case EndGarbage:
				_, _ = w.Write([]byte("{\"type\": \"ADDED\", \"object\": \n"))
				_, _ = w.Write([]byte("]]]\n"))
				flusher.Flush()
			}
			return
		case <-req.Context().Done():
			return
		}
	}
}

func status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(Object{"kind": "Status", "apiVersion": "v1", "metadata": Object{}, "status": "Failure",
		"message": msg, "reason": reason, "code": code})
}

func metaOf(obj Object) Object {
	m, _ := obj["metadata"].(Object)
	if m == nil {
		m = Object{}
		obj["metadata"] = m
	}
	return m
}

func labelsOf(obj Object) map[string]string {
	out := map[string]string{}
	if l, ok := metaOf(obj)["labels"].(Object); ok {
		for k, v := range l {
			out[k], _ = v.(string)
		}
	}
	if l, ok := metaOf(obj)["labels"].(map[string]string); ok {
		for k, v := range l {
			out[k] = v
		}
	}
	return out
}

func clone(obj Object) Object {
	b, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	var out Object
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

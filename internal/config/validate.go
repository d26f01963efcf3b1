package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

type validator struct {
	doc         *Document
	c           *Config
	out         Findings
	suggestions int
	// dropped counts findings past MaxFindings.
	dropped droppedFindings
	// backends by name, for references from shim, api keys and pools.
	backends map[string]*Backend
}

func (v *validator) add(sev Severity, path, format string, args ...any) {
	if v.doc.failed[path] {
		return // the decoder has already said what is wrong with this value
	}
	p := v.doc.position(path)
	v.dropped.admit(&v.out, v.doc.Findings, len(v.doc.Findings), Finding{
		Severity: sev, Path: clip(path), Message: clip(fmt.Sprintf(format, args...)),
		File: v.doc.File, Line: p.line, Column: p.col,
	})
}

func (v *validator) errorf(path, format string, args ...any) {
	v.add(SeverityError, path, format, args...)
}
func (v *validator) warnf(path, format string, args ...any) {
	v.add(SeverityWarning, path, format, args...)
}

// validate applies every configuration rule to a decoded document.
func validate(doc *Document) (Findings, droppedFindings) {
	v := &validator{doc: doc, c: doc.Config, backends: map[string]*Backend{}}
	v.server()
	v.backendList()
	v.apiKeys()
	v.discovery()
	v.load()
	v.shim()
	v.kv()
	v.eventBus()
	if !doc.maskOK {
		for _, p := range v.c.StillMasked() {
			v.errorf(p, "%q is how secrets are shown (config show, GET /admin/config), not a secret: give the value", Mask)
		}
	}
	return v.out, v.dropped
}

func (v *validator) server() {
	srv := &v.c.Server
	if p := checkHostPort(srv.BindAddress, true); p != "" {
		v.errorf("server.bind_address", "%s", p)
	}
	for _, d := range []struct {
		key string
		val Duration
	}{{"read_header_timeout", srv.ReadHeaderTimeout}, {"read_timeout", srv.ReadTimeout}, {"idle_timeout", srv.IdleTimeout}, {"write_timeout", srv.WriteTimeout}} {
		if d.val.D() < 100*time.Millisecond || d.val.D() > time.Hour {
			v.errorf("server."+d.key, "%s is out of range: use 100ms to 1h", d.val)
		}
	}
	if srv.ReadTimeout.D() < srv.ReadHeaderTimeout.D() {
		v.warnf("server.read_timeout", "read_timeout %s is shorter than read_header_timeout %s: the whole request is bounded by the shorter", srv.ReadTimeout, srv.ReadHeaderTimeout)
	}
	if srv.MaxHeaderBytes < MinMaxHeaderBytes || srv.MaxHeaderBytes > MaxMaxHeaderBytes {
		v.errorf("server.max_header_bytes", "%d is out of range: use %d (4 KiB) to %d (16 MiB)", srv.MaxHeaderBytes, MinMaxHeaderBytes, MaxMaxHeaderBytes)
	}
	if srv.MaxBodyBytes < MinMaxBodyBytes || srv.MaxBodyBytes > MaxMaxBodyBytes {
		v.errorf("server.max_body_bytes", "%d is out of range: use %d (1 KiB) to %d (1 GiB)", srv.MaxBodyBytes, MinMaxBodyBytes, MaxMaxBodyBytes)
	}
	if srv.MaxConnections < 1 || srv.MaxConnections > MaxMaxConnections {
		v.errorf("server.max_connections", "%d is out of range: use 1 to %d", srv.MaxConnections, MaxMaxConnections)
	}
	if srv.MaxInFlight < 1 {
		v.errorf("server.max_in_flight", "must be at least 1")
	} else if srv.MaxInFlight > srv.MaxConnections*64 {
		v.warnf("server.max_in_flight", "%d is more than 64 requests per allowed connection (max_connections %d): it will never be reached", srv.MaxInFlight, srv.MaxConnections)
	}
	if t := srv.TLS; t != nil {
		if t.Cert == "" {
			v.errorf("server.tls.cert", "set the certificate file (PEM), or remove server.tls to serve plain HTTP")
		}
		if t.Key == "" {
			v.errorf("server.tls.key", "set the private key file (PEM), or remove server.tls to serve plain HTTP")
		}
	}
	a := v.c.Admin
	if a.BindAddress != "" {
		if p := checkHostPort(a.BindAddress, true); p != "" {
			v.errorf("admin.bind_address", "%s", p)
		} else if samePort(a.BindAddress, v.c.Server.BindAddress) {
			v.errorf("admin.bind_address", "port collides with server.bind_address %q: choose another port, or omit admin.bind_address to serve /admin on the main listener", v.c.Server.BindAddress)
		}
		if a.Token == "" {
			v.warnf("admin.token", "admin.bind_address is set but admin.token is empty: the admin API stays off until a token is set")
		}
	}
}

func samePort(a, b string) bool {
	pa, okA := portOf(a)
	pb, okB := portOf(b)
	return okA && okB && pa == pb
}

func (v *validator) backendList() {
	for i := range v.c.Backends {
		b := &v.c.Backends[i]
		p := fmt.Sprintf("backends[%d]", i)
		switch {
		case b.Name == "":
			v.errorf(p+".name", "every backend needs a name")
		case len(b.Name) > 253 || !backendName.MatchString(b.Name):
			v.errorf(p+".name", "%q: use letters, digits, '-', '_' and '.', starting and ending with a letter or digit", b.Name)
		case v.backends[b.Name] != nil:
			v.errorf(p+".name", "backend name %q is used twice; names must be unique", b.Name)
		default:
			v.backends[b.Name] = b
		}
		if b.Type != "openai" {
			v.errorf(p+".type", "backend type %q is not supported: use openai", b.Type)
		}
		if u, err := url.Parse(b.URL); b.URL == "" {
			v.errorf(p+".url", "every backend needs a url, such as http://dynamo-frontend.dynamo.svc:8000")
		} else if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.errorf(p+".url", "%s is not an http:// or https:// URL with a host", shownURL(b.URL, u, err))
		} else if u.User != nil {
			v.errorf(p+".url", "credentials in the URL are not allowed: use api_key")
		}
		if !slices.Contains([]string{RoleUnified, RolePrefill, RoleDecode}, b.Role) {
			v.errorf(p+".role", "role %q is not one of unified, prefill, decode", b.Role)
		} else if b.Role != RoleUnified {
			// The router serves a request from one backend; Dynamo's
			// prefill/decode split is its workers', pinned through
			// dynamo.shim. A backend of either half alone is never chosen.
			v.warnf(p+".role", "a %s backend is never routed to: the router routes to unified backends only (Dynamo's disaggregated serving goes through dynamo.shim, whose backends are unified)", b.Role)
		}
		if b.Timeout <= 0 {
			v.errorf(p+".timeout", "timeout must be positive, such as \"300s\"")
		}
		if b.ResponsesAPI != ResponsesAPIChat && b.ResponsesAPI != ResponsesAPINative {
			v.errorf(p+".responses_api", "responses_api %q is not one of chat, native", b.ResponsesAPI)
		}
		for j, m := range b.Models {
			if strings.TrimSpace(m) == "" {
				v.errorf(fmt.Sprintf("%s.models[%d]", p, j), "model ids must not be empty")
			}
		}
	}
}

func (v *validator) apiKeys() {
	seen := map[string]bool{}
	for i, k := range v.c.APIKeys {
		p := fmt.Sprintf("api_keys[%d]", i)
		h := k.KeyHash
		if len(h) == 64 && lowerHex64.MatchString(h) {
			h = "sha256:" + h
		}
		if msg := checkHashRef(h, "sha256", "key_hash"); msg != "" {
			v.errorf(p+".key_hash", "%s (printf %%s \"$KEY\" | sha256sum); never the key itself", msg)
		} else if seen[h] {
			v.errorf(p+".key_hash", "this key hash is listed twice; merge the entries")
		}
		seen[h] = true
		v.knownBackends(p+".allowed_backends", k.AllowedBackends)
		if rl := k.RateLimit; rl != nil {
			if rl.RequestsPerSecond <= 0 {
				v.errorf(p+".rate_limit.requests_per_second", "must be a positive number of requests per second")
			}
			if rl.Burst < 0 {
				v.errorf(p+".rate_limit.burst", "must not be negative (0 means one second's worth of requests)")
			}
		}
	}
}

// knownBackends checks a list of backend names: each known, none twice.
func (v *validator) knownBackends(path string, names []string) {
	seen := map[string]bool{}
	for j, n := range names {
		ep := fmt.Sprintf("%s[%d]", path, j)
		switch {
		case v.backends[n] == nil:
			msg := fmt.Sprintf("%s is not a configured backend (backends[].name)", quote(n))
			if s := v.suggestBackend(n); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			v.errorf(ep, "%s", msg)
		case seen[n]:
			v.errorf(ep, "%q is listed twice", n)
		}
		seen[n] = true
	}
}

// suggestBackend finds a close backend name for a typo, within a bounded
// budget so that a file of many bad references stays cheap.
func (v *validator) suggestBackend(n string) string {
	if v.suggestions >= maxSuggestions || len(v.c.Backends) > maxSuggestCandidates {
		return ""
	}
	v.suggestions++
	return suggest(n, v.backendNames())
}

const (
	maxSuggestions       = 64
	maxSuggestCandidates = 256
)

func (v *validator) backendNames() []string {
	names := make([]string, 0, len(v.c.Backends))
	for _, b := range v.c.Backends {
		names = append(names, b.Name)
	}
	return names
}

// MinBackoffDelay is the least wait the discovery watcher keeps between two
// passes (discovery.MinDelay; that package does not import this one). An
// initial (or max) of zero is valid configuration, but a source that fails
// at once would then be retried in a tight loop, so at run time zero waits
// this long instead, and the warning for a zero initial says so.
const MinBackoffDelay = time.Millisecond

// backoff checks a reconnect backoff. The rule is only that max is at
// least initial; negative durations make no sense, and a zero initial is
// accepted with a warning because it does not mean "no wait" at run time.
func (v *validator) backoff(path string, b Backoff) {
	switch {
	case b.Initial < 0:
		v.errorf(path+".initial", "must not be negative; use a delay such as \"500ms\"")
	case b.Initial == 0:
		v.warnf(path+".initial", "initial 0s would retry a failed pass at once: the watcher waits at least %s instead, doubling up to max; set a delay such as \"500ms\"", MinBackoffDelay)
	}
	if b.Max < b.Initial {
		v.errorf(path+".max", "max (%s) must be at least initial (%s)", b.Max, b.Initial)
	}
}

// namespaceList checks a list of Dynamo namespaces: 1..16 unique valid names.
func (v *validator) namespaceList(path string, list []string, check func(string) string) {
	if len(list) > MaxDynamoNamespaces {
		v.errorf(path, "%d namespaces listed; at most %d are supported", len(list), MaxDynamoNamespaces)
	}
	seen := map[string]bool{}
	for i, ns := range list {
		ep := fmt.Sprintf("%s[%d]", path, i)
		if msg := check(ns); msg != "" {
			v.errorf(ep, "%s", msg)
		} else if seen[ns] {
			v.errorf(ep, "namespace %q is listed twice", ns)
		}
		seen[ns] = true
	}
}

func (v *validator) discovery() {
	d := &v.c.Dynamo.Discovery
	on := v.c.Dynamo.Enabled
	switch d.Source {
	case SourceEtcd, SourceFile, SourceKubernetes, SourceKubernetesPods:
	default:
		v.errorf("dynamo.discovery.source", "source %q is not one of etcd, file, kubernetes, kubernetes_pods", d.Source)
	}
	v.etcd(on && d.Source == SourceEtcd)
	v.fileStore(on && d.Source == SourceFile)
	v.kubernetes(d.Source == SourceKubernetes || d.Source == SourceKubernetesPods)
}

func (v *validator) etcd(active bool) {
	selected := v.c.Dynamo.Discovery.Source == SourceEtcd
	e := &v.c.Dynamo.Discovery.Etcd
	const p = "dynamo.discovery.etcd"
	if active && len(e.Endpoints) == 0 {
		v.errorf(p+".endpoints", "dynamo is enabled with the etcd source: list 1 to %d endpoints, such as [\"http://etcd.dynamo.svc:2379\"]", MaxEtcdEndpoints)
	}
	if len(e.Endpoints) > MaxEtcdEndpoints {
		v.errorf(p+".endpoints", "%d endpoints listed; at most %d are supported", len(e.Endpoints), MaxEtcdEndpoints)
	}
	schemes := map[string]int{}
	seen := map[string]bool{}
	for i, ep := range e.Endpoints {
		path := fmt.Sprintf("%s.endpoints[%d]", p, i)
		scheme, msg := checkEtcdEndpoint(ep)
		switch {
		case msg != "":
			v.errorf(path, "%s", msg)
			continue
		case seen[ep]:
			// The client still reaches the member, so the file stays
			// valid; the repeat is most likely a typo for another member.
			v.warnf(path, "endpoint %q is listed twice; remove the duplicate", ep)
		}
		seen[ep] = true
		if _, ok := schemes[scheme]; !ok {
			schemes[scheme] = i
		}
	}
	if active && v.c.Dynamo.Load.Transport == TransportDirect {
		for i, ep := range e.Endpoints {
			if _, msg := checkEtcdEndpoint(ep); msg == "" && etcdEndpointLooksExternal(ep) {
				v.warnf(fmt.Sprintf("%s.endpoints[%d]", p, i), "%q looks outside the cluster, but direct load subscriptions connect to the workers' pod addresses from here: if the router runs outside the cluster, use dynamo.load.transport: broker with the event bus (a Service whose namespace is named like a public top-level domain, such as etcd.prod, is not taken for an outside name when written with its svc label: etcd.prod.svc)", ep)
				break
			}
		}
	}
	hasHTTP, hasHTTPS := schemes["http"], schemes["https"]
	_, okHTTP := schemes["http"]
	_, okHTTPS := schemes["https"]
	if okHTTP && okHTTPS {
		v.errorf(fmt.Sprintf("%s.endpoints[%d]", p, max(hasHTTP, hasHTTPS)), "endpoints mix http:// and https://: use one scheme for every endpoint")
	}
	if e.TLS != nil && okHTTP {
		v.errorf(p+".tls", "a tls block cannot be used with plaintext http:// endpoints: write https:// (or host:port) endpoints, or remove tls")
	}
	if msg := checkDynamoNamespace(e.Namespace); msg != "" {
		v.errorf(p+".namespace", "%s", msg)
	}
	if len(e.Namespaces) > 0 {
		v.namespaceList(p+".namespaces", e.Namespaces, checkDynamoNamespace)
		if e.Namespace != DefaultNamespace {
			v.errorf(p+".namespace", "namespace and namespaces are exclusive: list %q in namespaces and remove namespace", e.Namespace)
		}
	}
	if t := e.TLS; t != nil && (t.ClientCert == "") != (t.ClientKey == "") {
		missing := "client_key"
		if t.ClientCert == "" {
			missing = "client_cert"
		}
		v.errorf(p+".tls."+missing, "client_cert and client_key go together: set %s too, or remove both", missing)
	}
	if a := e.Auth; a != nil {
		if a.Username == "" {
			// Valid, but the etcd client authenticates only with both a
			// username and a password: without one the block does nothing.
			v.warnf(p+".auth.username", "auth needs a username: without one the router does not authenticate to etcd")
		}
		if selected && e.TLS == nil && !okHTTPS {
			v.warnf(p+".auth", "auth over a plaintext connection sends the password and session token in clear text: use https:// endpoints with a tls block")
		}
	}
	v.backoff(p+".watch_reconnect_backoff", e.WatchReconnectBackoff)
}

func (v *validator) fileStore(active bool) {
	f := &v.c.Dynamo.Discovery.File
	const p = "dynamo.discovery.file"
	if active && f.Root == "" {
		v.errorf(p+".root", "the file source needs root, the directory of Dynamo's DYN_FILE_KV store")
	}
	if msg := checkDynamoNamespace(f.Namespace); msg != "" {
		v.errorf(p+".namespace", "%s", msg)
	}
	if len(f.Namespaces) > 0 {
		v.namespaceList(p+".namespaces", f.Namespaces, checkDynamoNamespace)
		if f.Namespace != DefaultNamespace {
			v.errorf(p+".namespace", "namespace and namespaces are exclusive: list %q in namespaces and remove namespace", f.Namespace)
		}
	}
}

func (v *validator) kubernetes(active bool) {
	k := &v.c.Dynamo.Discovery.Kubernetes
	const p = "dynamo.discovery.kubernetes"
	if !active {
		return
	}
	pods := v.c.Dynamo.Discovery.Source == SourceKubernetesPods
	if k.Namespace == "" {
		v.errorf(p+".namespace", "set namespace, the Kubernetes namespace of the fleet's pods")
	} else if msg := checkDNS1123Label(k.Namespace); msg != "" {
		v.errorf(p+".namespace", "%s", msg)
	}
	switch {
	case k.DynamoNamespace != "" && len(k.DynamoNamespaces) > 0:
		v.errorf(p+".dynamo_namespaces", "dynamo_namespace and dynamo_namespaces are exclusive: list %q in dynamo_namespaces and remove dynamo_namespace", k.DynamoNamespace)
	case len(k.DynamoNamespaces) > 0:
		v.namespaceList(p+".dynamo_namespaces", k.DynamoNamespaces, checkLabelValue)
	case k.DynamoNamespace != "" || v.doc.Has(p+".dynamo_namespace"):
		if msg := checkLabelValue(k.DynamoNamespace); msg != "" {
			v.errorf(p+".dynamo_namespace", "%s", msg)
		}
	default:
		v.errorf(p+".dynamo_namespace", "set dynamo_namespace, the workers' DYN_NAMESPACE (the nvidia.com/dynamo-namespace label)")
	}
	if pods {
		v.podModels()
		v.warnf("dynamo.discovery.source", "kubernetes_pods gives no load or capacity signals (no model cards, no kv_metrics publishers, no dp ranks): workers are picked round-robin; prefer source: kubernetes where RBAC allows dynamoworkermetadatas and endpointslices")
	} else {
		if k.Model != "" {
			v.warnf(p+".model", "source: kubernetes takes models from the workers' model cards; model is ignored")
		}
		if len(k.Models) > 0 {
			v.warnf(p+".models", "source: kubernetes takes models from the workers' model cards; models is ignored")
		}
	}
	v.backoff(p+".watch_reconnect_backoff", k.WatchReconnectBackoff)
}

func (v *validator) podModels() {
	k := &v.c.Dynamo.Discovery.Kubernetes
	const p = "dynamo.discovery.kubernetes"
	switch {
	case k.Model != "" && len(k.Models) > 0:
		v.errorf(p+".models", "model and models are exclusive: use models to map each nvidia.com/dynamo-component to its model, or model alone")
		return
	case k.Model == "" && len(k.Models) == 0:
		v.errorf(p+".model", "source: kubernetes_pods needs model (the served model name) or models (per nvidia.com/dynamo-component)")
		return
	case k.Model != "" && strings.TrimSpace(k.Model) == "":
		v.errorf(p+".model", "is blank: give the served model name, which every pod is published under")
		return
	}
	// Counted and named once each and only when valid; an entry naming a
	// listed namespace that is itself refused is not refused again.
	namespaces, listed := v.watchedNamespaces(), v.c.Dynamo.Discovery.Namespaces()
	type key struct{ ns, component string }
	seen := map[key]bool{}
	components := map[string]bool{}
	for i, m := range k.Models {
		ep := fmt.Sprintf("%s.models[%d]", p, i)
		if msg := checkLabelValue(m.Component); msg != "" {
			v.errorf(ep+".component", "component %s", msg)
		}
		if strings.TrimSpace(m.Model) == "" {
			v.errorf(ep+".model", "every models entry needs the model its component serves")
		}
		ns := m.DynamoNamespace
		switch {
		case ns == "" && len(namespaces) > 1:
			v.errorf(ep+".dynamo_namespace", "several dynamo_namespaces are watched: say which one this component belongs to")
		case ns != "" && !slices.Contains(listed, ns):
			v.errorf(ep+".dynamo_namespace", "%q is not a watched dynamo namespace (%s)", ns, strings.Join(namespaces, ", "))
		}
		if ns == "" && len(namespaces) == 1 {
			ns = namespaces[0]
		}
		if seen[key{ns, m.Component}] {
			v.errorf(ep+".component", "component %q is mapped twice in dynamo namespace %q", m.Component, ns)
		}
		seen[key{ns, m.Component}] = true
		components[m.Component] = true
	}
	if len(components) > MaxKubeComponents {
		v.errorf(p+".models", "%d components mapped; at most %d are supported", len(components), MaxKubeComponents)
	}
}

func (v *validator) load() {
	l := &v.c.Dynamo.Load
	const p = "dynamo.load"
	if l.MaxStaleness.D() < MinMaxStaleness || l.MaxStaleness.D() > MaxMaxStaleness {
		v.errorf(p+".max_staleness", "%s is out of range: use 100ms to 5m", l.MaxStaleness)
	}
	switch l.Transport {
	case TransportDirect, TransportBroker:
	default:
		v.errorf(p+".transport", "transport %q is not one of direct, broker", l.Transport)
	}
	if len(l.DirectAllowCIDRs) > MaxDirectAllowCIDRs {
		v.errorf(p+".direct_allow_cidrs", "%d CIDRs listed; at most %d are supported", len(l.DirectAllowCIDRs), MaxDirectAllowCIDRs)
	}
	for i, c := range l.DirectAllowCIDRs {
		if _, err := netip.ParsePrefix(c); err != nil {
			v.errorf(fmt.Sprintf("%s.direct_allow_cidrs[%d]", p, i), "%q is not an IPv4 or IPv6 CIDR such as \"10.0.0.0/8\"", c)
		}
	}
	// Without the list the direct connector dials whatever address a
	// fleet record names, so validation always suggests one. The
	// kubernetes_pods source registers no publishers today, and the
	// warning says so rather than claiming an exposure it does not have.
	if v.c.Dynamo.Enabled && l.Transport == TransportDirect && len(l.DirectAllowCIDRs) == 0 {
		if v.c.Dynamo.Discovery.Source == SourceKubernetesPods {
			v.warnf(p+".direct_allow_cidrs", "no direct_allow_cidrs: kubernetes_pods registers no publishers, but any other source would have the router connect to whatever publisher address the fleet registers; add the worker Pod CIDR (such as \"10.0.0.0/8\")")
		} else {
			v.warnf(p+".direct_allow_cidrs", "no direct_allow_cidrs: the router will connect to any publisher address the fleet registers; add the worker Pod CIDR (such as \"10.0.0.0/8\")")
		}
	}
	if l.Transport == TransportBroker && !v.c.Dynamo.EventBus.Enabled {
		v.warnf(p+".transport", "transport: broker with dynamo.event_bus.enabled: false: subscriptions stay pending and no load samples arrive; enable the event bus")
	}
	v.busyThreshold(l.BusyThreshold)
	if q := l.Queue; q != nil {
		if q.Size < 1 || q.Size > MaxQueueSize {
			v.errorf(p+".queue.size", "%d requests: use 1 to %d", q.Size, MaxQueueSize)
		}
		if q.MaxWait.D() < MinQueueMaxWait || q.MaxWait.D() > MaxQueueMaxWait {
			v.errorf(p+".queue.max_wait", "%s is out of range: use 10ms to 5m", q.MaxWait)
		}
		if l.BusyThreshold == nil {
			v.warnf(p+".queue", "without dynamo.load.busy_threshold no worker is ever busy, so no request waits in the queue; set a busy threshold")
		}
	}
}

// busyThreshold checks dynamo.load.busy_threshold: a share of the KV
// blocks in (0, 1], a positive multiple of the batch for prefill, at least
// one of them, and a hysteresis below each.
func (v *validator) busyThreshold(b *BusyThreshold) {
	if b == nil {
		return
	}
	const p = "dynamo.load.busy_threshold"
	if b.KVBlocks == nil && b.PrefillTokens == nil {
		v.errorf(p, "a busy threshold needs kv_blocks (a share of total_kv_blocks in use, such as 0.9), prefill_tokens (a multiple of max_num_batched_tokens, such as 2) or both")
		return
	}
	if t := b.KVBlocks; t != nil && (*t <= 0 || *t > 1) {
		v.errorf(p+".kv_blocks", "%g is a share of total_kv_blocks: use more than 0 and at most 1", *t)
	}
	if t := b.PrefillTokens; t != nil && *t <= 0 {
		v.errorf(p+".prefill_tokens", "%g is a multiple of max_num_batched_tokens: use more than 0", *t)
	}
	switch h := b.Hysteresis; {
	case h < 0:
		v.errorf(p+".hysteresis", "%g must not be negative (0 frees a worker as soon as it is below its threshold)", h)
	case b.KVBlocks != nil && *b.KVBlocks > 0 && h >= *b.KVBlocks, b.PrefillTokens != nil && *b.PrefillTokens > 0 && h >= *b.PrefillTokens:
		v.errorf(p+".hysteresis", "%g must be below each threshold, or a busy worker is never free again", h)
	}
	if src := v.c.Dynamo.Discovery.Source; v.c.Dynamo.Enabled && src == SourceKubernetesPods {
		v.warnf(p, "kubernetes_pods gives no load or capacity signals, so no worker is ever judged busy")
	}
}

func (v *validator) shim() {
	s := &v.c.Dynamo.Shim
	const p = "dynamo.shim"
	if len(s.Backends) > MaxShimBackends {
		v.errorf(p+".backends", "%d shim backends listed; at most %d are supported", len(s.Backends), MaxShimBackends)
	}
	v.knownBackends(p+".backends", s.Backends)
	namespaces := v.watchedNamespaces()
	switch {
	case len(s.Backends) > 0 && len(s.Pools) > 0:
		v.errorf(p+".pools", "backends and pools are exclusive: use pools, one per Dynamo namespace")
	case len(namespaces) > 1 && len(s.Backends) > 0:
		v.errorf(p+".backends", "%d Dynamo namespaces are watched: replace shim.backends with shim.pools, exactly one pool per namespace", len(namespaces))
	case len(namespaces) > 1 && len(s.Pools) == 0 && v.c.Dynamo.Enabled:
		v.errorf(p+".pools", "%d Dynamo namespaces are watched: add shim.pools, exactly one pool per namespace", len(namespaces))
	}
	if len(s.Pools) > 0 {
		v.pools(namespaces)
	}
	if len(s.ModelMap) > MaxModelMapEntries {
		v.errorf(p+".model_map", "%d entries; at most %d are supported", len(s.ModelMap), MaxModelMapEntries)
	}
	for _, k := range sortedKeys(s.ModelMap) {
		ep := mapEntryPath(p+".model_map", k)
		if strings.TrimSpace(k) == "" {
			v.errorf(ep, "model_map keys (client model ids) must not be empty")
		}
		if strings.TrimSpace(s.ModelMap[k]) == "" {
			v.errorf(ep, "model_map values (Dynamo display names) must not be empty")
		}
	}
	configured := len(s.Backends) > 0 || len(s.Pools) > 0
	if configured && !v.c.Dynamo.Enabled {
		v.warnf(p, "shim backends are set but dynamo.enabled is false: nothing is pinned until it is enabled")
	} else if configured && !v.c.DisaggregatedServing.Enabled {
		v.warnf(p, "shim backends are set but disaggregated_serving.enabled is false: nothing is pinned until it is enabled")
	}
	v.shimBackendFlags(p+".backends", s.Backends)
	for i, pool := range s.Pools {
		v.shimBackendFlags(fmt.Sprintf("%s.pools[%d].backends", p, i), pool.Backends)
	}
}

func (v *validator) shimBackendFlags(path string, names []string) {
	for j, n := range names {
		b := v.backends[n]
		if b == nil {
			continue
		}
		ep := fmt.Sprintf("%s[%d]", path, j)
		if b.Internal {
			v.warnf(ep, "backend %q is internal: true; a shim replica is usually a client-visible frontend", n)
		}
		if !b.Enabled {
			v.warnf(ep, "backend %q is enabled: false; this shim replica receives nothing", n)
		}
	}
}

// watchedNamespaces are the configured source's Dynamo namespaces, each
// once and only those that are valid: a namespace rejected (or repeated)
// in the discovery block has its own finding, and rules that count or name
// the watched namespaces (one shim pool each, models per namespace) must
// not add more about it.
func (v *validator) watchedNamespaces() []string {
	var out []string
	seen := map[string]bool{}
	for _, ns := range v.c.Dynamo.Discovery.Namespaces() {
		if checkDynamoNamespace(ns) == "" && !seen[ns] {
			seen[ns] = true
			out = append(out, ns)
		}
	}
	return out
}

func (v *validator) pools(namespaces []string) {
	const p = "dynamo.shim.pools"
	byNS := map[string]int{}
	owner := map[string]int{}
	for i, pool := range v.c.Dynamo.Shim.Pools {
		ep := fmt.Sprintf("%s[%d]", p, i)
		switch {
		case pool.Namespace == "":
			v.errorf(ep+".namespace", "every pool names its Dynamo namespace")
		case !slices.Contains(namespaces, pool.Namespace):
			v.errorf(ep+".namespace", "%q is not a watched Dynamo namespace (%s)", pool.Namespace, strings.Join(namespaces, ", "))
		default:
			if _, dup := byNS[pool.Namespace]; dup {
				v.errorf(ep+".namespace", "namespace %q has two pools; keep exactly one per namespace", pool.Namespace)
			}
			byNS[pool.Namespace] = i
		}
		if len(pool.Backends) == 0 {
			v.errorf(ep+".backends", "a pool needs at least one backend")
		}
		if len(pool.Backends) > MaxShimBackends {
			v.errorf(ep+".backends", "%d backends; at most %d are supported", len(pool.Backends), MaxShimBackends)
		}
		v.knownBackends(ep+".backends", pool.Backends)
		for j, b := range pool.Backends {
			if prev, ok := owner[b]; ok && prev != i {
				v.errorf(fmt.Sprintf("%s.backends[%d]", ep, j), "backend %q is already in pool %d; a replica belongs to one pool only", b, prev)
			}
			owner[b] = i
		}
	}
	for _, ns := range namespaces {
		if _, ok := byNS[ns]; !ok {
			v.errorf(p, "no pool for Dynamo namespace %q: add {namespace: %q, backends: [...]}", ns, ns)
		}
	}
}

func (v *validator) kv() {
	k := &v.c.Dynamo.KV
	const p = "dynamo.kv"
	seen := map[string]bool{}
	for i, a := range k.PinnedArtifacts {
		ep := fmt.Sprintf("%s.pinned_artifacts[%d]", p, i)
		if msg := checkHashRef(a, "blake3", "a pinned artifact"); msg != "" {
			v.errorf(ep, "%s (b3sum FILE, or continuum pin-artifact FILE)", msg)
		} else if seen[a] {
			v.warnf(ep, "%q is pinned twice", a)
		}
		seen[a] = true
	}
	if k.OverlapScoreCredit < 0 {
		v.errorf(p+".overlap_score_credit", "must not be negative")
	}
	if k.PrefillLoadScale < 0 {
		v.errorf(p+".prefill_load_scale", "must not be negative")
	}
	if k.RouterTemperature < 0 {
		v.errorf(p+".router_temperature", "must not be negative (0 picks the cheapest worker)")
	}
	cd := k.ConditionalDisaggregation
	if t := cd.DecodeBusyThreshold; t != nil && (*t < 0 || *t > 1) {
		v.errorf(p+".conditional_disaggregation.decode_busy_threshold", "%g is a fraction of total_kv_blocks: use 0 to 1", *t)
	}
	if cd.Enabled {
		v.warnf(p+".conditional_disaggregation.enabled", "dynamo.frontend --router-mode direct (Dynamo 1.5.x) rejects requests without a prefill id while prefill workers are registered, so bypassed requests fail with 503 disaggregated_prefill_decode_unavailable; enable only for frontends that accept them")
	}
}

func (v *validator) eventBus() {
	b := &v.c.Dynamo.EventBus
	const p = "dynamo.event_bus"
	// The listener's port must be its own: a listen address the file
	// writes is judged whether or not the bus runs now (turning it on is a
	// reload away), the default one only while the bus runs, so that a
	// server on the default bus port needs no event_bus block, and a file
	// that config show printed (every default written out) validates as
	// the file it was printed from.
	if msg := checkHostPort(b.Listen, true); msg != "" {
		v.errorf(p+".listen", "%s", msg)
	} else if b.Enabled || v.doc.Has(p+".listen") && b.Listen != DefaultBusListen {
		if samePort(b.Listen, v.c.Server.BindAddress) {
			v.errorf(p+".listen", "port collides with server.bind_address %q: the event bus needs a port of its own", v.c.Server.BindAddress)
		} else if v.c.Admin.BindAddress != "" && samePort(b.Listen, v.c.Admin.BindAddress) {
			v.errorf(p+".listen", "port collides with admin.bind_address %q: the event bus needs a port of its own", v.c.Admin.BindAddress)
		}
	}
	if b.Enabled {
		if b.TLS.Cert == "" {
			v.errorf(p+".tls.cert", "the event bus listener is TLS 1.3 only: set tls.cert")
		}
		if b.TLS.Key == "" {
			v.errorf(p+".tls.key", "the event bus listener is TLS 1.3 only: set tls.key")
		}
		if len(b.Brokers) == 0 {
			v.warnf(p+".brokers", "no brokers are allowed: no session can authenticate")
		}
	}
	if b.MaxSessions < 1 {
		v.errorf(p+".max_sessions", "must be at least 1")
	}
	if b.MaxStreamsPerSession < 1 || b.MaxStreamsPerSession > MaxStreamsPerSession {
		v.errorf(p+".max_streams_per_session", "must be from 1 to %d", MaxStreamsPerSession)
	} else if need := int64(b.MaxStreamsPerSession) * MinStreamBudgetBytes; b.MaxSessionBufferBytes < need {
		v.errorf(p+".max_session_buffer_bytes", "%d bytes is below max_streams_per_session × 64 KiB = %d: raise it or lower max_streams_per_session", b.MaxSessionBufferBytes, need)
	}
	// The welcome carries both in whole milliseconds, and clients refuse
	// a zero.
	if time.Duration(b.HeartbeatInterval) < time.Millisecond || time.Duration(b.HeartbeatInterval) > MaxBusInterval {
		v.errorf(p+".heartbeat_interval", "must be from 1ms to %v, such as \"10s\"", MaxBusInterval)
	}
	if time.Duration(b.IdleTimeout) < time.Millisecond || time.Duration(b.IdleTimeout) > MaxBusInterval {
		v.errorf(p+".idle_timeout", "must be from 1ms to %v, such as \"30s\"", MaxBusInterval)
	} else if b.HeartbeatInterval >= b.IdleTimeout {
		// Each side judges the other idle after idle_timeout without a
		// line: heartbeats no more frequent end every session as idle.
		v.errorf(p+".heartbeat_interval", "%v is not shorter than idle_timeout %v: every session would end as idle; heartbeat well within it, such as a third", time.Duration(b.HeartbeatInterval), time.Duration(b.IdleTimeout))
	}
	v.brokers()
	v.busAdvisories()
}

// busAdvisories warn about event bus settings that are valid but leave
// something unused or unreachable.
func (v *validator) busAdvisories() {
	b := &v.c.Dynamo.EventBus
	const p = "dynamo.event_bus"
	if !b.Enabled {
		return
	}
	// The listener runs whether or not dynamo is enabled, and no source
	// reads announced backends either way: an allowed kv_listener is idle.
	kvListeners := 0
	for i, e := range b.Brokers {
		if e.Role == BusRoleKVListener {
			kvListeners++
			v.warnf(fmt.Sprintf("%s.brokers[%d]", p, i), "no kv-events source of this router reads announced backends: a kv_listener session is accepted and stays idle")
		}
	}
	if !v.c.Dynamo.Enabled {
		return
	}
	if v.c.Dynamo.Load.Transport != TransportBroker {
		if kvListeners == 0 {
			v.warnf(p+".enabled", "the event bus listener runs but dynamo.load.transport is %s: no subscription goes through a broker", v.c.Dynamo.Load.Transport)
		}
		return
	}
	for _, ns := range v.c.Dynamo.Discovery.Namespaces() {
		allowed := false
		for _, e := range b.Brokers {
			if e.Role == BusRoleBroker && (len(e.Namespaces) == 0 || slices.Contains(e.Namespaces, ns)) {
				allowed = true
			}
		}
		if !allowed {
			v.warnf(p+".brokers", "no broker may declare namespace %q: its subscriptions stay pending", ns)
		}
	}
}

func (v *validator) brokers() {
	b := &v.c.Dynamo.EventBus
	const p = "dynamo.event_bus.brokers"
	ids := map[string]bool{}
	tokens := map[string]int{} // token_hash -> index of its first entry
	for i, e := range b.Brokers {
		ep := fmt.Sprintf("%s[%d]", p, i)
		switch {
		case e.ID == "":
			v.errorf(ep+".id", "every broker entry needs an id")
		case !validBrokerID(e.ID):
			v.errorf(ep+".id", "%q: a broker id is a lowercase DNS name without wildcards (it is matched against the client certificate's DNS SAN)", e.ID)
		case ids[e.ID]:
			v.errorf(ep+".id", "broker id %q is used twice", e.ID)
		}
		ids[e.ID] = true
		if e.TokenHash != "" {
			if msg := checkHashRef(e.TokenHash, "sha256", "token_hash"); msg != "" {
				v.errorf(ep+".token_hash", "%s (printf %%s \"$TOKEN\" | sha256sum); never the token itself", msg)
			} else if first, dup := tokens[e.TokenHash]; dup {
				// A token names one entry: the listener matches it to the
				// first entry holding its hash, never to this one.
				v.warnf(ep+".token_hash", "the same token_hash as brokers[%d]: this token always authenticates as %q, never as %q; give each entry its own token", first, b.Brokers[first].ID, e.ID)
			} else {
				tokens[e.TokenHash] = i
			}
		} else if b.TLS.ClientCA == "" {
			v.errorf(ep+".token_hash", "this broker cannot authenticate: set token_hash, or tls.client_ca for client certificates")
		}
		switch e.Role {
		case BusRoleBroker:
			if len(e.Backends) > 0 {
				v.errorf(ep+".backends", "backends are for role: kv_listener; a broker is allowed namespaces")
			}
			if len(e.Namespaces) == 0 {
				v.warnf(ep+".namespaces", "an empty namespaces list lets this broker serve every Dynamo namespace; list the namespaces it may serve")
			}
			for j, ns := range e.Namespaces {
				nsp := fmt.Sprintf("%s.namespaces[%d]", ep, j)
				if msg := checkDynamoNamespace(ns); msg != "" {
					v.errorf(nsp, "%s", msg)
				}
			}
		case BusRoleKVListener:
			if len(e.Namespaces) > 0 {
				v.errorf(ep+".namespaces", "a kv_listener is allowed backends, not namespaces")
			}
			if len(e.Backends) == 0 {
				v.errorf(ep+".backends", "a kv_listener needs the backends it may announce")
			}
			for j, b := range e.Backends {
				// What the hello can carry: a name without white space or
				// control characters, at most 253 bytes.
				if b == "" || len(b) > 253 || strings.ContainsFunc(b, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
					v.errorf(fmt.Sprintf("%s.backends[%d]", ep, j), "%q is not a backend name a kv_listener can announce (non-empty, at most 253 bytes, no white space or control characters)", b)
				}
			}
		default:
			v.errorf(ep+".role", "role %q is not one of broker, kv_listener", e.Role)
		}
	}
}

// shownURL is how a finding quotes a url: without the password of its
// user info (a backend URL may carry credentials), and not at all when it
// holds an '@' and does not parse (the credentials cannot be told apart).
func shownURL(raw string, u *url.URL, err error) string {
	switch {
	case err == nil:
		return strconv.Quote(u.Redacted())
	case strings.Contains(raw, "@"):
		return "the value (not shown: it may hold credentials)"
	}
	return strconv.Quote(raw)
}

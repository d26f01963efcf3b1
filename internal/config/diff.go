package config

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Tier is how a configuration change takes effect: read at use, by
// restarting the load and KV-event subscriptions, by replacing the discovery
// watcher, or by binding a listener's new address.
type Tier int

// Reload tiers, from the lightest to the heaviest.
const (
	// TierImmediate: read at use (next freshness check, next request) or
	// applied by its own supervisor without touching discovery.
	TierImmediate Tier = iota + 1
	// TierSubscriptionRestart: load and kv-events subscriptions restart with
	// the new connection policy; discovery and the registry are untouched.
	TierSubscriptionRestart
	// TierWatcherRestart: the discovery watcher is replaced.
	TierWatcherRestart
	// TierRebind: a listener address changed; the new address is bound
	// and the old listener drains its open connections.
	TierRebind
)

func (t Tier) String() string {
	switch t {
	case TierImmediate:
		return "immediate"
	case TierSubscriptionRestart:
		return "subscription_restart"
	case TierWatcherRestart:
		return "watcher_restart"
	case TierRebind:
		return "rebind"
	}
	return fmt.Sprintf("Tier(%d)", int(t))
}

// Watcher restart reasons: why a reload replaces the discovery watcher
// (WatcherRestart.Reason). When several apply, the first in reasonRank is
// the one reported.
const (
	ReasonEnabled    = "enabled"
	ReasonSource     = "source"
	ReasonNamespace  = "namespace"
	ReasonConnection = "connection"
	ReasonOther      = "other"
	ReasonNamespaces = "namespaces"
	ReasonBackoff    = "backoff"
)

// reasonRank orders reasons when several apply: the first wins.
var reasonRank = []string{ReasonEnabled, ReasonSource, ReasonNamespace, ReasonConnection, ReasonOther, ReasonNamespaces, ReasonBackoff}

// Change is one changed configuration path and how it takes effect.
type Change struct {
	Path   string
	Tier   Tier
	Reason string // for TierWatcherRestart
}

// WatcherRestart describes the one discovery watcher replacement a reload needs.
type WatcherRestart struct {
	Reason string
	// CountRestart is false when discovery is being turned off: the restart
	// counter (discovery_events_total{kind="restart"}) is not incremented.
	CountRestart bool
	// KeepSnapshot: only the backoff changed, so the old registry snapshot is
	// served until the new watcher's first full resync.
	KeepSnapshot bool
	// Prune lists the namespaces whose workers and publishers are dropped
	// (reason "namespaces"); the registry is otherwise kept.
	Prune []string
}

// Plan is the classification of every change between two configurations.
type Plan struct {
	Changes              []Change
	RestartSubscriptions bool
	Watcher              *WatcherRestart
}

// Diff classifies every difference between old and new by reload tier.
func Diff(oldCfg, newCfg *Config) Plan {
	var paths []string
	diffPaths(reflect.ValueOf(*oldCfg), reflect.ValueOf(*newCfg), "", &paths)
	var plan Plan
	reasons := map[string]bool{}
	for _, p := range paths {
		ch := classify(p, oldCfg, newCfg)
		plan.Changes = append(plan.Changes, ch)
		switch ch.Tier {
		case TierSubscriptionRestart:
			plan.RestartSubscriptions = true
		case TierWatcherRestart:
			reasons[ch.Reason] = true
		}
	}
	for _, r := range reasonRank {
		if !reasons[r] {
			continue
		}
		w := &WatcherRestart{Reason: r, CountRestart: newCfg.Dynamo.Enabled, KeepSnapshot: r == ReasonBackoff}
		if r == ReasonNamespaces {
			newNS := newCfg.Dynamo.Discovery.Namespaces()
			for _, ns := range oldCfg.Dynamo.Discovery.Namespaces() {
				if !slices.Contains(newNS, ns) {
					w.Prune = append(w.Prune, ns)
				}
			}
		}
		plan.Watcher = w
		break
	}
	return plan
}

// diffPaths appends the paths of leaves that differ. Lists and maps are
// leaves: a changed list is one change.
func diffPaths(a, b reflect.Value, path string, out *[]string) {
	if a.Kind() == reflect.Struct && a.Type() != durationType {
		t := a.Type()
		for i := range a.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			diffPaths(a.Field(i), b.Field(i), joinPath(path, name), out)
		}
		return
	}
	if a.Kind() == reflect.Pointer && !a.IsNil() && !b.IsNil() && a.Elem().Kind() == reflect.Struct {
		diffPaths(a.Elem(), b.Elem(), path, out)
		return
	}
	if !equalValue(a, b) {
		*out = append(*out, path)
	}
}

// equalValue is DeepEqual that treats nil and empty lists and maps alike,
// at any depth (a configuration read back from JSON has empty lists where
// the file had none).
func equalValue(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !equalValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		iter := a.MapRange()
		for iter.Next() {
			v := b.MapIndex(iter.Key())
			if !v.IsValid() || !equalValue(iter.Value(), v) {
				return false
			}
		}
		return true
	case reflect.Struct:
		for i := range a.NumField() {
			if !equalValue(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return equalValue(a.Elem(), b.Elem())
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

func classify(path string, oldCfg, newCfg *Config) Change {
	ch := Change{Path: path, Tier: TierImmediate}
	switch {
	case path == "server.bind_address", path == "admin.bind_address":
		ch.Tier = TierRebind
	case path == "dynamo.event_bus.listen":
		// A running event bus restarts its listener at the new address
		// (one it cannot bind is logged and retried, as a failed start
		// is; the reload itself applies); a disabled one only records it.
		if oldCfg.Dynamo.EventBus.Enabled && newCfg.Dynamo.EventBus.Enabled {
			ch.Tier = TierRebind
		}
	case path == "dynamo.enabled":
		ch.Tier, ch.Reason = TierWatcherRestart, ReasonEnabled
	case path == "dynamo.load.direct_allow_cidrs" && sameSet(oldCfg.Dynamo.Load.DirectAllowCIDRs, newCfg.Dynamo.Load.DirectAllowCIDRs):
		// Reordered, not changed: the policy is the union of the ranges.
	case path == "dynamo.load.transport", path == "dynamo.load.direct_allow_cidrs":
		if oldCfg.Dynamo.Enabled || newCfg.Dynamo.Enabled {
			ch.Tier = TierSubscriptionRestart
		}
	case strings.HasPrefix(path, "dynamo.discovery."):
		if r := discoveryReason(strings.TrimPrefix(path, "dynamo.discovery."), oldCfg, newCfg); r != "" {
			ch.Tier, ch.Reason = TierWatcherRestart, r
		}
	}
	return ch
}

// discoveryReason says why a change under dynamo.discovery restarts the
// watcher, or "" when no running watcher reads the changed field.
func discoveryReason(p string, oldCfg, newCfg *Config) string {
	if !oldCfg.Dynamo.Enabled && !newCfg.Dynamo.Enabled {
		return ""
	}
	if p == "source" {
		return ReasonSource
	}
	od, nd := &oldCfg.Dynamo.Discovery, &newCfg.Dynamo.Discovery
	if od.Source != nd.Source {
		return ReasonSource
	}
	section, field, _ := strings.Cut(p, ".")
	active := map[string]string{SourceEtcd: "etcd", SourceFile: "file", SourceKubernetes: "kubernetes", SourceKubernetesPods: "kubernetes"}[nd.Source]
	if section != active {
		return ""
	}
	switch {
	case strings.HasPrefix(field, "watch_reconnect_backoff"):
		return ReasonBackoff
	case field == "namespace" && section == "kubernetes":
		return ReasonNamespace
	case field == "namespace", field == "namespaces", field == "dynamo_namespace", field == "dynamo_namespaces":
		return namespaceReason(od, nd)
	case field == "model", field == "models":
		if nd.Source == SourceKubernetes {
			return "" // the metadata source reads models from cards
		}
		if od.Kubernetes.Model == nd.Kubernetes.Model && sameModels(od.Kubernetes.Models, nd.Kubernetes.Models) {
			return "" // reordered, not changed: a component is mapped once per namespace
		}
		if namespaceReason(od, nd) == ReasonNamespaces && keptModelsEqual(od, nd) {
			return ReasonNamespaces
		}
		return ReasonOther
	case section == "kubernetes":
		return ReasonOther
	case section == "etcd" && field == "endpoints" && sameEndpoints(od.Etcd.Endpoints, nd.Etcd.Endpoints):
		return "" // the same servers, listed in another order or spelling
	default:
		return ReasonConnection // endpoints, tls, auth, root
	}
}

// namespaceReason: a scalar namespace change resets the registry; a change
// of the namespace list prunes removed namespaces when kept ones keep their
// model mapping.
func namespaceReason(od, nd *Discovery) string {
	on, nn := od.Namespaces(), nd.Namespaces()
	if sameSet(on, nn) {
		return "" // reordered, not changed
	}
	listed := func(d *Discovery) bool {
		switch d.Source {
		case SourceKubernetes, SourceKubernetesPods:
			return len(d.Kubernetes.DynamoNamespaces) > 0
		case SourceFile:
			return len(d.File.Namespaces) > 0
		}
		return len(d.Etcd.Namespaces) > 0
	}
	if !listed(od) && !listed(nd) {
		return ReasonNamespace
	}
	if !keptModelsEqual(od, nd) {
		return ReasonOther
	}
	return ReasonNamespaces
}

// keptModelsEqual reports whether every namespace in both configurations
// maps its components to the same models (kubernetes_pods only).
func keptModelsEqual(od, nd *Discovery) bool {
	if nd.Source != SourceKubernetesPods {
		return true
	}
	if od.Kubernetes.Model != nd.Kubernetes.Model {
		return false
	}
	nn := nd.Namespaces()
	for _, ns := range od.Namespaces() {
		if !slices.Contains(nn, ns) {
			continue
		}
		if !slices.Equal(modelsIn(od, ns), modelsIn(nd, ns)) {
			return false
		}
	}
	return true
}

// sameModels reports whether two models lists hold the same entries in
// any order (validation refuses a component mapped twice in a namespace,
// so the order of a valid list means nothing).
func sameModels(a, b []ComponentModel) bool {
	if len(a) != len(b) {
		return false
	}
	byKey := func(x, y ComponentModel) int {
		return cmp.Or(cmp.Compare(x.DynamoNamespace, y.DynamoNamespace), cmp.Compare(x.Component, y.Component), cmp.Compare(x.Model, y.Model))
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, byKey)
	slices.SortFunc(b, byKey)
	return slices.Equal(a, b)
}

// sameEndpoints reports whether two etcd endpoint lists name the same
// servers the same way: the client balances over them (so their order
// means nothing) and reaches each as host:port under one scheme for all,
// https when any names it.
func sameEndpoints(a, b []string) bool {
	norm := func(l []string) (hosts []string, tls bool) {
		for _, e := range l {
			if scheme, host, ok := strings.Cut(e, "://"); ok {
				tls = tls || strings.EqualFold(scheme, "https")
				e = host
			}
			hosts = append(hosts, e)
		}
		return hosts, tls
	}
	ah, at := norm(a)
	bh, bt := norm(b)
	return at == bt && sameSet(ah, bh)
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func modelsIn(d *Discovery, ns string) []ComponentModel {
	single := len(d.Namespaces()) == 1
	var out []ComponentModel
	for _, m := range d.Kubernetes.Models {
		if m.DynamoNamespace == ns || (m.DynamoNamespace == "" && single) {
			out = append(out, ComponentModel{Component: m.Component, Model: m.Model})
		}
	}
	slices.SortFunc(out, func(a, b ComponentModel) int { return strings.Compare(a.Component, b.Component) })
	return out
}

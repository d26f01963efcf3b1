package kube

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// Labels and annotations the Dynamo operator puts on the pods it deploys;
// the pods source selects and classifies pods by them.
const (
	LabelBackend          = "nvidia.com/dynamo-discovery-backend"
	LabelEnabled          = "nvidia.com/dynamo-discovery-enabled"
	LabelDynamoNamespace  = "nvidia.com/dynamo-namespace"
	LabelComponent        = "nvidia.com/dynamo-component"
	LabelComponentType    = "nvidia.com/dynamo-component-type"
	LabelSubComponentType = "nvidia.com/dynamo-sub-component-type"
	AnnotationMode        = "nvidia.com/dynamo-kube-discovery-mode"
)

// Bounds of the pods source.
const (
	PodPageSize = 500
	MaxPods     = 16384
)

// discoverySelector selects what the operator marks for Kubernetes discovery.
const discoverySelector = LabelBackend + "=kubernetes," + LabelEnabled + "=true"

// PodSelector is the pods source's label selector for these Dynamo namespaces.
func PodSelector(dynamoNamespaces []string) string {
	if len(dynamoNamespaces) == 1 {
		return discoverySelector + "," + LabelDynamoNamespace + "=" + dynamoNamespaces[0]
	}
	return discoverySelector + "," + LabelDynamoNamespace + " in (" + strings.Join(dynamoNamespaces, ",") + ")"
}

// PodsSource is the kubernetes_pods source: ready worker pods with the
// operator's labels, their role from the labels and their model from the
// configuration. Pods have no cards, so there are no load or capacity
// signals and workers are picked round-robin.
type PodsSource struct {
	Client     ClientOptions
	Namespace  string
	Namespaces []string // Dynamo namespaces
	Model      string
	Models     []config.ComponentModel
	Timing     Timing
	Logger     *slog.Logger

	// unmapped remembers the ready pods already logged as unmapped, by
	// name and uid, across passes (a re-list logs none again), until they
	// are unready, deleted, mapped, or missing from a list; a pod made
	// anew under a name (another uid) is a new pod, logged at its
	// readiness however it was seen. Bounded by MaxPods.
	unmapped map[string]types.UID
	// calls bounds the requests of each pass's seed phase.
	calls seedCalls
}

var _ discovery.Source = (*PodsSource)(nil)

// NewPods builds the source from configuration.
func NewPods(k config.Kubernetes, namespaces []string, client ClientOptions, logger *slog.Logger) *PodsSource {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &PodsSource{Client: client, Namespace: k.Namespace, Namespaces: namespaces, Model: k.Model, Models: k.Models,
		Timing: DefaultTiming, Logger: logger}
}

// Name implements discovery.Source.
func (s *PodsSource) Name() string { return config.SourceKubernetesPods }

// Run implements discovery.Source: one list, one watch, until the watch
// ends.
func (s *PodsSource) Run(ctx context.Context, sink discovery.Sink) error {
	deadline := time.Now().Add(s.Timing.Seed)
	seedCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	_, cs, err := connect(s.Client)
	if err != nil {
		return err
	}
	pods := cs.CoreV1().Pods(s.Namespace)
	selector := PodSelector(s.Namespaces)
	list := func(ctx context.Context, o metav1.ListOptions) ([]corev1.Pod, metav1.ListMeta, error) {
		l, err := pods.List(ctx, o)
		if err != nil {
			return nil, metav1.ListMeta{}, err
		}
		return l.Items, l.ListMeta, nil
	}
	held := map[string]podEntry{}
	rv, cut, err := listAll(seedCtx, &s.calls, s.Timing.Seed, list, selector, PodPageSize, MaxPods, func(p *corev1.Pod) {
		held[p.Name] = s.classify(p)
	})
	if err != nil {
		return fmt.Errorf("listing pods in %s: %w", s.Namespace, err)
	}
	// Pods deleted while no watch was open are gone from the list.
	for name := range s.unmapped {
		if _, listed := held[name]; !listed {
			delete(s.unmapped, name)
		}
	}
	if cut {
		s.Logger.Warn("dynamo pod discovery: too many pods; the rest are ignored", "namespace", s.Namespace, "max", MaxPods)
	}
	// The list is published before the watch opens: what it read is the
	// fleet at rv whether or not the watch then opens within the seed
	// timeout (a pass that fails there is retried after its backoff). The
	// pass is connected only once the watch is open.
	sink.ResyncBegin()
	for _, name := range sortedKeys(held) {
		if e := held[name]; e.key != "" {
			sink.Put(e.key, e.value)
		}
	}
	early := discovery.PublishRead(sink)
	if !early {
		sink.ResyncEnd()
	}

	w, err := openWatch(ctx, seedCtx, &s.calls, pods.Watch, selector, rv, s.Timing)
	if err != nil {
		return fmt.Errorf("watching pods in %s: %w", s.Namespace, err)
	}
	if early {
		sink.ResyncEnd()
	}
	st := newStream("pods", w, s.Timing)
	defer st.stop()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-st.timer.C:
			return st.idleErr()
		case ev, ok := <-w.ResultChan():
			typ, obj, err := st.receive(ev, ok)
			if err != nil {
				return err
			}
			if obj == nil {
				continue
			}
			p, ok := obj.(*corev1.Pod)
			if !ok {
				return fmt.Errorf("pods watch: unexpected %T", obj)
			}
			var next podEntry
			_, known := held[p.Name]
			switch {
			case typ == watch.Deleted:
				delete(s.unmapped, p.Name) // a pod of that name made anew is logged anew
			case !known && len(held) >= MaxPods:
				// Refused at the cap, as in the list; told once a pass
				// (the list's cut told it already).
				if !cut {
					cut = true
					s.Logger.Warn("dynamo pod discovery: too many pods; new ones are ignored", "namespace", s.Namespace, "max", MaxPods, "pod", p.Name)
				}
				continue
			default:
				next = s.classify(p)
			}
			prev := held[p.Name]
			if typ == watch.Deleted {
				delete(held, p.Name)
			} else {
				held[p.Name] = next
			}
			if prev.key != "" && prev.key != next.key {
				sink.Delete(prev.key)
			}
			if next.key != "" && (next.key != prev.key || string(next.value) != string(prev.value)) {
				sink.Put(next.key, next.value)
			}
			sink.Flush()
		}
	}
}

// podEntry is what one held pod contributes: a key and value, or nothing.
type podEntry struct {
	key   string
	value []byte
}

// PodRole is the role a worker pod's labels give, or "" for components
// that are not workers (frontend, planner, epp, ...).
func PodRole(labels map[string]string) string {
	switch t := labels[LabelComponentType]; t {
	case "prefill", "decode":
		return t
	case "worker":
		switch sub := labels[LabelSubComponentType]; sub {
		case "prefill", "decode":
			return sub
		}
		return "aggregated"
	}
	return ""
}

// PodReady reports whether a pod counts as a live worker: Running, its
// Ready condition True, and not being deleted.
func PodReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// classify turns a pod into its record: a worker, a refusal, or nothing.
func (s *PodsSource) classify(p *corev1.Pod) podEntry {
	dn := p.Labels[LabelDynamoNamespace]
	if !slices.Contains(s.Namespaces, dn) {
		return podEntry{}
	}
	role := PodRole(p.Labels)
	if role == "" || !PodReady(p) {
		delete(s.unmapped, p.Name) // logged again when it is ready again
		return podEntry{}
	}
	component := p.Labels[LabelComponent]
	model := s.modelOf(dn, component)
	if model == "" {
		s.logUnmapped(p, dn, component)
		return podEntry{}
	}
	delete(s.unmapped, p.Name)
	// Only a pod that would otherwise be a worker is refused for the
	// container mode: a frontend, an unready or an unmapped pod is no
	// worker either way, and counting it would report a problem that
	// changes nothing.
	if p.Annotations[AnnotationMode] == "container" {
		r := wire.Refusal{Kind: "refused", Namespace: dn, Reason: fmt.Sprintf("pod %s uses the container discovery mode; only pod mode is supported", p.Name)}
		return podEntry{key: wire.PrefixRefusals + "pod/" + p.Namespace + "/" + p.Name, value: r.Encode()}
	}
	rec := wire.PodRecord{Pod: p.Name, Component: component, Role: role, Model: model, InstanceID: HashPodName(p.Name)}
	return podEntry{key: wire.PrefixPods + dn + "/" + p.Name, value: rec.Encode()}
}

// modelOf maps a component label to its model: the one configured model,
// or the models entry for exactly this component (and namespace, when the
// entry names one).
func (s *PodsSource) modelOf(dn, component string) string {
	if s.Model != "" {
		return s.Model
	}
	for _, m := range s.Models {
		if m.Component == component && (m.DynamoNamespace == "" || m.DynamoNamespace == dn) {
			return m.Model
		}
	}
	return ""
}

func (s *PodsSource) logUnmapped(p *corev1.Pod, dn, component string) {
	if uid, done := s.unmapped[p.Name]; done && uid == p.UID {
		return
	}
	if s.unmapped == nil || len(s.unmapped) >= MaxPods {
		s.unmapped = map[string]types.UID{}
	}
	s.unmapped[p.Name] = p.UID
	s.Logger.Debug("dynamo pod discovery: ready pod's component maps to no model; held, not published",
		"pod", p.Name, "dynamo_namespace", dn, "component", component)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

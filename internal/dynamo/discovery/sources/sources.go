// Package sources builds the configured discovery source.
package sources

import (
	"fmt"
	"log/slog"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/etcd"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/filestore"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
)

// New returns the source selected by d.Source, and the backoff it runs
// under. Files it names (TLS) are read now and reported with their path.
// Kubernetes sources use in-cluster credentials, then KUBECONFIG.
func New(d *config.Discovery, logger *slog.Logger) (discovery.Source, discovery.Backoff, error) {
	return NewWithKube(d, logger, kube.ClientOptions{})
}

// NewWithKube is New with explicit Kubernetes credentials.
func NewWithKube(d *config.Discovery, logger *slog.Logger, client kube.ClientOptions) (discovery.Source, discovery.Backoff, error) {
	namespaces := d.Namespaces()
	switch d.Source {
	case config.SourceEtcd, "":
		s, err := etcd.New(d.Etcd, namespaces, logger)
		return s, backoff(d.Etcd.WatchReconnectBackoff), err
	case config.SourceFile:
		s, err := filestore.New(d.File.Root, namespaces, logger)
		return s, backoff(config.Backoff{Initial: config.Duration(config.DefaultBackoffInitial), Max: config.Duration(config.DefaultBackoffMax)}), err
	case config.SourceKubernetesPods, config.SourceKubernetes:
		b := backoff(d.Kubernetes.WatchReconnectBackoff)
		b.ResetAfter = kube.ResetAfter(b.Max)
		if d.Source == config.SourceKubernetes {
			return kube.NewMetadata(d.Kubernetes, namespaces, client, logger), b, nil
		}
		return kube.NewPods(d.Kubernetes, namespaces, client, logger), b, nil
	}
	return nil, discovery.Backoff{}, fmt.Errorf("unknown discovery source %q", d.Source)
}

func backoff(b config.Backoff) discovery.Backoff {
	return discovery.Backoff{Initial: b.Initial.D(), Max: b.Max.D()}
}

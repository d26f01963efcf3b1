package kube

import (
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/continuum-router/continuum/internal/dynamo/discovery"
)

// ClientOptions selects the credentials of a pass. With neither field set,
// in-cluster credentials are tried first, then KUBECONFIG or ~/.kube/config.
type ClientOptions struct {
	// Kubeconfig is an explicit kubeconfig file.
	Kubeconfig string
	// Context is the kubeconfig context to use instead of the current one.
	Context string
}

// RESTConfig resolves credentials. Exec credential plugins are forced to
// interactiveMode Never: a plugin waiting for a human must fail, not hang a
// pass. Requests and watches are JSON.
func RESTConfig(o ClientOptions) (*rest.Config, error) {
	// In a pod whose service account token is not mounted
	// (automountServiceAccountToken off), a kubeconfig may still serve;
	// without one, no retry mends it.
	var inCluster error
	if o.Kubeconfig == "" && o.Context == "" {
		c, err := rest.InClusterConfig()
		switch {
		case err == nil:
			return finish(c), nil
		case !errors.Is(err, rest.ErrNotInCluster):
			inCluster = fmt.Errorf("in-cluster credentials: %w", err)
		}
	}
	kubeconfigError := func(err error) error {
		if inCluster != nil {
			return &discovery.ConfigError{Err: fmt.Errorf("%w; and no kubeconfig: %w", inCluster, err)}
		}
		return &discovery.ConfigError{Err: fmt.Errorf("kubeconfig: %w", err)}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	raw, err := rules.Load()
	if err != nil {
		return nil, kubeconfigError(err)
	}
	for _, ai := range raw.AuthInfos {
		if ai.Exec != nil {
			ai.Exec.InteractiveMode = clientcmdapi.NeverExecInteractiveMode
		}
	}
	c, err := clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{CurrentContext: o.Context}).ClientConfig()
	if err != nil {
		return nil, kubeconfigError(err)
	}
	return finish(c), nil
}

func finish(c *rest.Config) *rest.Config {
	if c.ExecProvider != nil {
		c.ExecProvider.InteractiveMode = clientcmdapi.NeverExecInteractiveMode
	}
	c.ContentType = "application/json"
	c.AcceptContentTypes = "application/json"
	c.UserAgent = "continuum"
	// A pass lists a few pages and opens watches; client-side throttling
	// would only delay re-lists.
	c.QPS, c.Burst = 50, 100
	// Answers are read within bounds (boundBodies); a watch's stream
	// learns whether its response ended cleanly or by a transport error,
	// a bound's included (trackWatchEnds, wrapped around it).
	c.Wrap(boundBodies)
	c.Wrap(trackWatchEnds)
	return c
}

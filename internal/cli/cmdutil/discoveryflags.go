package cmdutil

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
)

// DiscoveryFlags are the flags that choose and reach a discovery source,
// shared by the commands that read a fleet (discover, tail-load, ...).
type DiscoveryFlags struct {
	Source        string
	EtcdEndpoints []string
	Namespaces    []string
	FileRoot      string
	CACert        string
	ClientCert    string
	ClientKey     string
	ServerName    string
	Username      string
	PasswordEnv   string

	// Kubernetes sources.
	Kubeconfig       string
	KubeContext      string
	KubeNamespace    string
	DynamoNamespaces []string
	Model            string
	Models           []string // component=model

	// EverySource names flags the command takes whatever the source
	// (the broker declares its namespaces with --dynamo-namespace).
	EverySource []string

	// names are the flags Register added, in their order; given those
	// Capture found on the command line.
	names []string
	given []string

	changedSource       bool
	changedRoot         bool
	changedEtcdSecurity bool
	changedPasswordEnv  bool
	// cmd is the command the flags are on: Resolve tells its standard
	// error the discovery settings' warnings.
	cmd *cobra.Command
}

// Register adds the flags to cmd.
func (o *DiscoveryFlags) Register(cmd *cobra.Command) {
	o.cmd = cmd
	fl := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	fl.StringVar(&o.Source, "source", "", "discovery source: etcd, file, kubernetes or kubernetes_pods (default from --config, else etcd)")
	fl.StringSliceVar(&o.EtcdEndpoints, "etcd-endpoints", nil, "etcd endpoints, comma-separated (http(s)://host:port or host:port)")
	fl.StringArrayVar(&o.Namespaces, "namespace", nil, "Dynamo namespace to read (repeatable; default from --config, else dynamo)")
	fl.StringVar(&o.FileRoot, "file-root", "", "root of Dynamo's file store (DYN_FILE_KV) for --source file")
	fl.StringVar(&o.CACert, "etcd-ca-cert", "", "CA certificate to verify etcd with")
	fl.StringVar(&o.ClientCert, "etcd-client-cert", "", "client certificate for etcd")
	fl.StringVar(&o.ClientKey, "etcd-client-key", "", "client key for etcd")
	fl.StringVar(&o.ServerName, "etcd-server-name", "", "TLS server name to expect from etcd")
	fl.StringVar(&o.Username, "etcd-username", "", "etcd user (read-only is enough)")
	fl.StringVar(&o.PasswordEnv, "etcd-password-env", "ETCD_PASSWORD", "environment variable holding the etcd password")
	fl.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file for the Kubernetes sources (default: in-cluster, then KUBECONFIG or ~/.kube/config)")
	fl.StringVar(&o.KubeContext, "context", "", "kubeconfig context to use")
	fl.StringVar(&o.KubeNamespace, "kube-namespace", "", "Kubernetes namespace of the fleet's pods")
	dynHelp := "Dynamo namespace (the pods' nvidia.com/dynamo-namespace label) to read (repeatable)"
	if slices.Contains(o.EverySource, "dynamo-namespace") {
		dynHelp = "Dynamo namespace served, whatever the source (repeatable; etcd and the file store read it unless --namespace is given)"
	}
	fl.StringArrayVar(&o.DynamoNamespaces, "dynamo-namespace", nil, dynHelp)
	fl.StringVar(&o.Model, "model", "", "model served by every worker pod (kubernetes_pods)")
	fl.StringArrayVar(&o.Models, "models", nil, "[DYNAMO_NAMESPACE/]COMPONENT=MODEL: model of the pods with this nvidia.com/dynamo-component label, in that Dynamo namespace when several are watched (kubernetes_pods; repeatable)")
	fl.VisitAll(func(f *pflag.Flag) { o.names = append(o.names, f.Name) })
	cmd.Flags().AddFlagSet(fl)
	RegisterEnumCompletion(cmd, "source", []string{config.SourceEtcd, config.SourceFile, config.SourceKubernetes, config.SourceKubernetesPods})
	_ = cmd.MarkFlagFilename("kubeconfig")
	_ = cmd.MarkFlagDirname("file-root")
}

// Capture records which flags were given; call it once flags are parsed.
func (o *DiscoveryFlags) Capture(fl *pflag.FlagSet) {
	o.changedSource = fl.Changed("source")
	o.changedRoot = fl.Changed("file-root")
	for _, n := range []string{"etcd-ca-cert", "etcd-client-cert", "etcd-client-key", "etcd-server-name", "etcd-username"} {
		o.changedEtcdSecurity = o.changedEtcdSecurity || fl.Changed(n)
	}
	o.changedPasswordEnv = fl.Changed("etcd-password-env")
	o.given = o.given[:0]
	for _, n := range o.names {
		if fl.Changed(n) {
			o.given = append(o.given, n)
		}
	}
}

// flagSources are the discovery sources each source-specific flag applies
// to; a flag absent applies to all.
var flagSources = map[string][]string{
	"etcd-endpoints":    {config.SourceEtcd},
	"etcd-ca-cert":      {config.SourceEtcd},
	"etcd-client-cert":  {config.SourceEtcd},
	"etcd-client-key":   {config.SourceEtcd},
	"etcd-server-name":  {config.SourceEtcd},
	"etcd-username":     {config.SourceEtcd},
	"etcd-password-env": {config.SourceEtcd},
	"namespace":         {config.SourceEtcd, config.SourceFile},
	"file-root":         {config.SourceFile},
	"kubeconfig":        {config.SourceKubernetes, config.SourceKubernetesPods},
	"context":           {config.SourceKubernetes, config.SourceKubernetesPods},
	"kube-namespace":    {config.SourceKubernetes, config.SourceKubernetesPods},
	"dynamo-namespace":  {config.SourceKubernetes, config.SourceKubernetesPods},
	"model":             {config.SourceKubernetesPods},
	"models":            {config.SourceKubernetesPods},
}

// checkApplies refuses a flag given for a source it does not apply to:
// ignored, it would read another namespace or place than the one asked
// for and say nothing (discover --source kubernetes --namespace x reads
// the default Dynamo namespace).
func (o *DiscoveryFlags) checkApplies(source string) error {
	switch source {
	case config.SourceEtcd, config.SourceFile, config.SourceKubernetes, config.SourceKubernetesPods:
	default:
		return nil // validation names the source's own mistake
	}
	for _, n := range o.given {
		srcs, ok := flagSources[n]
		if !ok || slices.Contains(srcs, source) || slices.Contains(o.EverySource, n) {
			continue
		}
		from := "--source"
		if !o.changedSource {
			from = "the source (from --config, else the default)"
		}
		hint := ""
		switch n {
		case "namespace":
			hint = "; a Kubernetes fleet's Dynamo namespace is --dynamo-namespace, its pods' namespace --kube-namespace"
		case "dynamo-namespace", "kube-namespace":
			hint = "; the Dynamo namespace in etcd or a file store is --namespace"
		case "model", "models":
			hint = "; source kubernetes takes models from the workers' model cards"
		}
		return FlagErrorf("--%s applies to source %s; %s is %s%s", n, strings.Join(srcs, " or "), from, source, hint)
	}
	return nil
}

// FirstGiven returns the first discovery flag given on fl, "" when none
// was: a command that reads the fleet only in one mode refuses them in the
// others rather than ignore them.
func (o *DiscoveryFlags) FirstGiven(fl *pflag.FlagSet) string {
	for _, n := range o.names {
		if fl.Changed(n) {
			return n
		}
	}
	return ""
}

// SetChanged marks --source and --file-root as given (for callers that
// fill the struct without parsing flags).
func (o *DiscoveryFlags) SetChanged(source, root bool) { o.changedSource, o.changedRoot = source, root }

// Resolve returns the configuration --config gives, with the discovery
// flags applied over it; its discovery settings are validated.
func (o *DiscoveryFlags) Resolve(configFile string, env config.LookupEnv) (*config.Config, error) {
	cfg := config.DefaultFor(env)
	if configFile != "" {
		doc, err := config.Load(configFile, config.Options{Env: env})
		if err != nil {
			return nil, &ExitError{Code: ExitUsage, Err: err}
		}
		if n := doc.Findings.Errors(); n > 0 {
			return nil, ConfigErrors(configFile, doc.Findings, n)
		}
		cfg = doc.Config
	}
	d := &cfg.Dynamo.Discovery
	if o.changedSource {
		d.Source = o.Source
	}
	if len(o.EtcdEndpoints) > 0 {
		d.Etcd.Endpoints = o.EtcdEndpoints
	}
	if o.changedRoot {
		d.File.Root = o.FileRoot
	}
	if len(o.Namespaces) > 0 {
		one, many := o.Namespaces[0], []string(nil)
		if len(o.Namespaces) > 1 {
			one, many = config.DefaultNamespace, o.Namespaces
		}
		// Into the block of the source read: the other's would be judged
		// too, and a mistake reported twice, once for a source not read.
		switch d.Source {
		case config.SourceEtcd:
			d.Etcd.Namespace, d.Etcd.Namespaces = one, many
		case config.SourceFile:
			d.File.Namespace, d.File.Namespaces = one, many
		default:
			d.Etcd.Namespace, d.Etcd.Namespaces = one, many
			d.File.Namespace, d.File.Namespaces = one, many
		}
	}
	if err := o.checkApplies(d.Source); err != nil {
		return nil, err
	}
	if err := o.applyKube(&d.Kubernetes); err != nil {
		return nil, err
	}
	if o.changedEtcdSecurity {
		// Each TLS flag overrides its own field of --config's tls block
		// (--etcd-server-name alone keeps the file's CA and client pair).
		if o.CACert != "" || o.ClientCert != "" || o.ClientKey != "" || o.ServerName != "" {
			var tls config.EtcdTLS
			if d.Etcd.TLS != nil {
				tls = *d.Etcd.TLS
			}
			override(&tls.CACert, o.CACert)
			override(&tls.ClientCert, o.ClientCert)
			override(&tls.ClientKey, o.ClientKey)
			override(&tls.ServerName, o.ServerName)
			d.Etcd.TLS = &tls
		}
		if o.Username != "" {
			// The user's password must be set where it is looked for, as
			// with a variable named on the command line: an empty one
			// would fail later as a refused login, far from its cause.
			pw, ok := env(o.PasswordEnv)
			if !ok && !o.changedPasswordEnv { // a variable named on the command line is judged below
				return nil, FlagErrorf("--etcd-username: the environment variable %s, which holds the password, is not set (name another with --etcd-password-env)", o.PasswordEnv)
			}
			d.Etcd.Auth = &config.Auth{Username: o.Username, Password: pw}
		}
	}
	// A password variable named on the command line is that of the user
	// given beside it or in --config, and must be set: an empty password
	// would fail later as a refused login, far from its cause.
	if o.changedPasswordEnv {
		if d.Etcd.Auth == nil || d.Etcd.Auth.Username == "" {
			return nil, FlagErrorf("--etcd-password-env names the password of an etcd user: pass --etcd-username, or --config with dynamo.discovery.etcd.auth.username")
		}
		pw, ok := env(o.PasswordEnv)
		if !ok {
			return nil, FlagErrorf("--etcd-password-env: the environment variable %s is not set", o.PasswordEnv)
		}
		d.Etcd.Auth.Password = pw
	}
	if d.Source == config.SourceEtcd && len(d.Etcd.Endpoints) == 0 {
		return nil, FlagErrorf("no etcd endpoints: pass --etcd-endpoints, or --config with dynamo.discovery.etcd.endpoints")
	}
	// Discovery works whether or not routing is enabled; judge its settings.
	cfg.Dynamo.Enabled = true
	var problems []string
	for _, f := range config.Validate("flags", cfg) {
		switch {
		case !strings.HasPrefix(f.Path, "dynamo.discovery."):
		case f.Severity == config.SeverityError && len(o.Namespaces) > 0 &&
			(strings.HasPrefix(f.Path, "dynamo.discovery.etcd.namespace") || strings.HasPrefix(f.Path, "dynamo.discovery.file.namespace")):
			// What the flag set is told as the flag's.
			problems = append(problems, "--namespace: "+f.Message+" ("+f.Path+")")
		case f.Severity == config.SeverityError:
			problems = append(problems, f.Path+": "+f.Message)
		case o.cmd != nil:
			// A warning (credentials over plaintext, an endpoint that looks
			// outside the cluster) is told, as config validate tells it;
			// under --log-format json as a JSON line, like every other line
			// the process writes (a Kubernetes log pipeline reads them).
			if JSONLogs(o.cmd) {
				slog.New(slog.NewJSONHandler(o.cmd.ErrOrStderr(), nil)).Warn("configuration warning", "finding", f.Path+": "+f.Message)
			} else {
				_, _ = fmt.Fprintf(o.cmd.ErrOrStderr(), "warning: %s: %s\n", f.Path, f.Message)
			}
		}
	}
	if len(problems) > 0 {
		return nil, FlagErrorf("%s", strings.Join(problems, "\n"))
	}
	return cfg, nil
}

// override sets *field to v when a flag gave v.
func override(field *string, v string) {
	if v != "" {
		*field = v
	}
}

// KubeClient returns the Kubernetes credentials the flags select.
func (o *DiscoveryFlags) KubeClient() kube.ClientOptions {
	return kube.ClientOptions{Kubeconfig: o.Kubeconfig, Context: o.KubeContext}
}

func (o *DiscoveryFlags) applyKube(k *config.Kubernetes) error {
	if o.KubeNamespace != "" {
		k.Namespace = o.KubeNamespace
	}
	switch len(o.DynamoNamespaces) {
	case 0:
	case 1:
		k.DynamoNamespace, k.DynamoNamespaces = o.DynamoNamespaces[0], nil
	default:
		k.DynamoNamespace, k.DynamoNamespaces = "", o.DynamoNamespaces
	}
	// Exactly one of the two names the models, on the command line as in
	// a file: a flag overrides the file's setting, but the two flags
	// together are refused rather than one dropped.
	if o.Model != "" && len(o.Models) > 0 {
		return FlagErrorf("--model and --models are mutually exclusive: give one")
	}
	if o.Model != "" {
		k.Model, k.Models = o.Model, nil
	}
	if len(o.Models) > 0 {
		k.Model, k.Models = "", nil
		for _, m := range o.Models {
			// A component label value holds no '/': one before the '='
			// ends the Dynamo namespace the component belongs to, which
			// several watched namespaces need.
			comp, model, ok := strings.Cut(m, "=")
			ns, c, scoped := strings.Cut(comp, "/")
			if !scoped {
				ns, c = "", comp
			}
			if !ok || c == "" || model == "" || (scoped && ns == "") {
				return FlagErrorf("--models %q: want [DYNAMO_NAMESPACE/]COMPONENT=MODEL", m)
			}
			k.Models = append(k.Models, config.ComponentModel{Component: c, Model: model, DynamoNamespace: ns})
		}
	}
	return nil
}

// ConfigErrors says why a configuration is refused in one line: its first
// error finding (file:line:col, key and message), how many more there are,
// and the command that lists them all.
func ConfigErrors(file string, fs config.Findings, n int) error {
	var first config.Finding
	for _, f := range fs {
		if f.Severity == config.SeverityError {
			first = f
			break
		}
	}
	more := ""
	switch {
	case n == 2:
		more = " (and 1 more error)"
	case n > 2:
		more = fmt.Sprintf(" (and %d more errors)", n-1)
	}
	return fmt.Errorf("%s%s; run continuum config validate %s", first.String(), more, file)
}

// JSONLogs reports whether the command line asks for JSON logs
// (--log-format json, the root's flag every command inherits).
func JSONLogs(cmd *cobra.Command) bool {
	fl := cmd.Flag("log-format")
	return fl != nil && fl.Value.String() == "json"
}

package cmdutil

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/continuum-router/continuum/internal/config"
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

	changedSource       bool
	changedRoot         bool
	changedEtcdSecurity bool
}

// Register adds the flags to cmd.
func (o *DiscoveryFlags) Register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&o.Source, "source", "", "discovery source: etcd or file (default from --config, else etcd)")
	fl.StringSliceVar(&o.EtcdEndpoints, "etcd-endpoints", nil, "etcd endpoints, comma-separated (http(s)://host:port or host:port)")
	fl.StringArrayVar(&o.Namespaces, "namespace", nil, "Dynamo namespace to read (repeatable; default from --config, else dynamo)")
	fl.StringVar(&o.FileRoot, "file-root", "", "root of Dynamo's file store (DYN_FILE_KV) for --source file")
	fl.StringVar(&o.CACert, "etcd-ca-cert", "", "CA certificate to verify etcd with")
	fl.StringVar(&o.ClientCert, "etcd-client-cert", "", "client certificate for etcd")
	fl.StringVar(&o.ClientKey, "etcd-client-key", "", "client key for etcd")
	fl.StringVar(&o.ServerName, "etcd-server-name", "", "TLS server name to expect from etcd")
	fl.StringVar(&o.Username, "etcd-username", "", "etcd user (read-only is enough)")
	fl.StringVar(&o.PasswordEnv, "etcd-password-env", "ETCD_PASSWORD", "environment variable holding the etcd password")
	RegisterEnumCompletion(cmd, "source", []string{config.SourceEtcd, config.SourceFile})
	_ = cmd.MarkFlagDirname("file-root")
}

// Capture records which flags were given; call it once flags are parsed.
func (o *DiscoveryFlags) Capture(fl *pflag.FlagSet) {
	o.changedSource = fl.Changed("source")
	o.changedRoot = fl.Changed("file-root")
	for _, n := range []string{"etcd-ca-cert", "etcd-client-cert", "etcd-client-key", "etcd-server-name", "etcd-username"} {
		o.changedEtcdSecurity = o.changedEtcdSecurity || fl.Changed(n)
	}
}

// SetChanged marks --source and --file-root as given (for callers that
// fill the struct without parsing flags).
func (o *DiscoveryFlags) SetChanged(source, root bool) { o.changedSource, o.changedRoot = source, root }

// Resolve returns the configuration --config gives, with the discovery
// flags applied over it; its discovery settings are validated.
func (o *DiscoveryFlags) Resolve(configFile string, env config.LookupEnv) (*config.Config, error) {
	cfg := config.Default()
	if configFile != "" {
		doc, err := config.Load(configFile, config.Options{Env: env})
		if err != nil {
			return nil, &ExitError{Code: ExitUsage, Err: err}
		}
		if n := doc.Findings.Errors(); n > 0 {
			return nil, fmt.Errorf("%s has %d errors; run continuum config validate %s", configFile, n, configFile)
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
		d.Etcd.Namespace, d.Etcd.Namespaces = one, many
		d.File.Namespace, d.File.Namespaces = one, many
	}
	if o.changedEtcdSecurity {
		if o.CACert != "" || o.ClientCert != "" || o.ClientKey != "" || o.ServerName != "" {
			d.Etcd.TLS = &config.EtcdTLS{CACert: o.CACert, ClientCert: o.ClientCert, ClientKey: o.ClientKey, ServerName: o.ServerName}
		}
		if o.Username != "" {
			pw, _ := env(o.PasswordEnv)
			d.Etcd.Auth = &config.Auth{Username: o.Username, Password: pw}
		}
	}
	if d.Source == config.SourceEtcd && len(d.Etcd.Endpoints) == 0 {
		return nil, FlagErrorf("no etcd endpoints: pass --etcd-endpoints, or --config with dynamo.discovery.etcd.endpoints")
	}
	// Discovery works whether or not routing is enabled; judge its settings.
	cfg.Dynamo.Enabled = true
	var problems []string
	for _, f := range config.Validate("flags", cfg) {
		if f.Severity == config.SeverityError && strings.HasPrefix(f.Path, "dynamo.discovery.") {
			problems = append(problems, f.Path+": "+f.Message)
		}
	}
	if len(problems) > 0 {
		return nil, FlagErrorf("%s", strings.Join(problems, "\n"))
	}
	return cfg, nil
}

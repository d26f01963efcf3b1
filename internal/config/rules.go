package config

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"golang.org/x/net/publicsuffix"
)

// Limits that configuration validation enforces: the most entries each list
// may hold, the range of dynamo.load.max_staleness, and Kubernetes' own limit
// on the length of a label value.
const (
	MaxEtcdEndpoints    = 16
	MaxDynamoNamespaces = 16
	MaxShimBackends     = 64
	MaxModelMapEntries  = 1024
	MaxDirectAllowCIDRs = 64
	MaxKubeComponents   = 256
	MinMaxStaleness     = 100 * time.Millisecond
	MaxMaxStaleness     = 5 * time.Minute
	// MaxQueueSize bounds dynamo.load.queue.size; MinQueueMaxWait and
	// MaxQueueMaxWait bound its max_wait.
	MaxQueueSize         = 65536
	MinQueueMaxWait      = 10 * time.Millisecond
	MaxQueueMaxWait      = 5 * time.Minute
	kubeLabelValueMaxLen = 63
)

// checkEtcdEndpoint accepts http(s)://host:port and host:port and returns the
// scheme ("http", "https", or "" for the bare form), or a reason to reject.
func checkEtcdEndpoint(s string) (scheme, problem string) {
	rest := s
	if i := strings.Index(s, "://"); i >= 0 {
		scheme = strings.ToLower(s[:i])
		if scheme != "http" && scheme != "https" {
			return "", fmt.Sprintf("scheme %q is not supported: use http://host:port, https://host:port or host:port", scheme)
		}
		rest = s[i+3:]
	}
	switch {
	case rest == "":
		return "", "empty endpoint: write host:port"
	case strings.Contains(rest, "@"):
		return "", "credentials in the URL are not allowed: remove user@ and set dynamo.discovery.etcd.auth instead"
	case strings.Contains(rest, "?"):
		return "", "a query string is not allowed: write only scheme://host:port"
	case strings.Contains(rest, "#"):
		return "", "a fragment is not allowed: write only scheme://host:port"
	case scheme == "" && (strings.HasPrefix(strings.ToLower(rest), "http:") || strings.HasPrefix(strings.ToLower(rest), "https:")):
		return "", "malformed URL: write http://host:port or https://host:port"
	case strings.Contains(rest, "/"):
		return "", "a path is not allowed (not even a trailing '/'): write only scheme://host:port"
	}
	if p := checkHostPort(rest, false); p != "" {
		return "", p
	}
	return scheme, ""
}

// etcdEndpointLooksExternal reports whether a valid etcd endpoint's host
// looks outside a Kubernetes cluster: a public IP address (not loopback,
// private, link-local or shared address space), or a dotted name under a
// public top-level domain (one ICANN manages: .com, .io, ...) that is
// neither a Service name (a "svc" label) nor under ".local" or
// ".internal". In-cluster short names, a Service and
// its namespace ("etcd.dynamo") or a pod under a headless Service
// ("etcd-0.etcd-headless.dynamo"), end in a namespace, not a public
// domain; but a namespace named like a public top-level domain ("prod",
// "dev", "app") cannot be told from one by the name alone: "etcd.prod" is
// warned as "etcd.io" is, and the warning says to write "etcd.prod.svc".
// Direct load subscriptions need the workers' pod addresses, which a
// router beside an external etcd usually cannot reach.
func etcdEndpointLooksExternal(endpoint string) bool {
	rest := endpoint
	if i := strings.Index(endpoint, "://"); i >= 0 {
		rest = endpoint[i+3:]
	}
	host, _, err := net.SplitHostPort(rest)
	if err != nil {
		return false
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		internal := ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || sharedAddressSpace.Contains(ip)
		return !internal
	}
	if host == "localhost" || !strings.Contains(host, ".") {
		return false
	}
	if strings.HasSuffix(host, ".local") || strings.HasSuffix(host, ".internal") || slices.Contains(strings.Split(host, "."), "svc") {
		return false
	}
	_, icann := publicsuffix.PublicSuffix(host)
	return icann
}

// sharedAddressSpace (100.64.0.0/10) carries pod networks in some clusters.
var sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")

// ListenProblem says what is wrong with a listen address (host:port, the
// host optional), or "" when nothing is: a command-line flag's check
// before anything starts.
func ListenProblem(s string) string { return checkHostPort(s, true) }

// checkHostPort validates host:port with IPv6 hosts in brackets. With
// allowEmptyHost, ":8080" (every address) is accepted and port 0 too.
func checkHostPort(s string, listen bool) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "[") {
			return fmt.Sprintf("%q: put an IPv6 address in brackets, as in [::1]:2379", s)
		}
		return fmt.Sprintf("%q is not host:port", s)
	}
	if p := checkPort(port, listen); p != "" {
		return fmt.Sprintf("%q: %s", s, p)
	}
	if host == "" {
		if listen {
			return ""
		}
		return fmt.Sprintf("%q has no host", s)
	}
	if strings.HasPrefix(s, "[") {
		a, err := netip.ParseAddr(host)
		if err != nil || !strings.Contains(host, ":") {
			return fmt.Sprintf("%q: %q in brackets is not an IPv6 address", s, host)
		}
		if a.Zone() != "" && !listen {
			// An endpoint becomes a URL, where a zone would need escaping
			// (%25) that the client's parse does not undo for it.
			return fmt.Sprintf("%q: an IPv6 zone (%%%s) is not supported in an endpoint: use a global address or a host name", s, a.Zone())
		}
		return ""
	}
	if !validHostname(host) {
		return fmt.Sprintf("%q: %q is not a valid host name or address", s, host)
	}
	return ""
}

func checkPort(port string, listen bool) string {
	// Digits only: Atoi also takes a sign ("+2379"), which no URL parse
	// takes as a port.
	digits := port != "" && len(port) <= 5 && strings.Trim(port, "0123456789") == ""
	n, err := strconv.Atoi(port)
	if !digits || err != nil || n > 65535 || (n == 0 && !listen) {
		return fmt.Sprintf("port %q must be a number from 1 to 65535", port)
	}
	return ""
}

func portOf(hostport string) (int, bool) {
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(p)
	return n, err == nil && n > 0
}

func validHostname(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !hostnameChar(c) {
				return false
			}
		}
	}
	return true
}

func hostnameChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// checkDynamoNamespace: a Dynamo namespace is non-empty and holds no '/' (it
// is one segment of the discovery keys), white space or control characters.
func checkDynamoNamespace(s string) string {
	if s == "" {
		return "must not be empty"
	}
	for _, c := range s {
		switch {
		case c == '/':
			return fmt.Sprintf("%q contains '/'; a Dynamo namespace is one key segment", s)
		case unicode.IsSpace(c):
			return fmt.Sprintf("%q contains white space", s)
		case unicode.IsControl(c):
			return fmt.Sprintf("%q contains a control character", s)
		}
	}
	return ""
}

var (
	dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	labelValue   = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
	lowerHex64   = regexp.MustCompile(`^[0-9a-f]{64}$`)
	anyHex64     = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)
	backendName  = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

// validBrokerID: a broker id is matched against the DNS SAN of a client
// certificate, so it is a lowercase DNS name: dot-separated DNS-1123 labels
// (no empty label, no wildcard, no trailing dot), at most 253 bytes.
func validBrokerID(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if len(label) > 63 || !dns1123Label.MatchString(label) {
			return false
		}
	}
	return true
}

func checkDNS1123Label(s string) string {
	if len(s) > 63 || !dns1123Label.MatchString(s) {
		return fmt.Sprintf("%q is not a DNS-1123 label: lowercase letters, digits and '-', at most 63 characters, starting and ending with a letter or digit", s)
	}
	return ""
}

func checkLabelValue(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if len(s) > kubeLabelValueMaxLen || !labelValue.MatchString(s) {
		return fmt.Sprintf("%q is not a Kubernetes label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", s)
	}
	return ""
}

// checkHashRef validates "<algo>:<64 lowercase hex>".
func checkHashRef(s, algo, what string) string {
	hexPart, ok := strings.CutPrefix(s, algo+":")
	switch {
	case ok && len(hexPart) != 64:
		return fmt.Sprintf("%s must be %q followed by exactly 64 lowercase hex digits", what, algo+":")
	case !ok:
		return fmt.Sprintf("%s must be %q followed by 64 lowercase hex digits", what, algo+":")
	case anyHex64.MatchString(hexPart) && !lowerHex64.MatchString(hexPart):
		return fmt.Sprintf("%s must use lowercase hex digits: write %q", what, algo+":"+strings.ToLower(hexPart))
	case !lowerHex64.MatchString(hexPart):
		return fmt.Sprintf("%s must be %q followed by exactly 64 lowercase hex digits", what, algo+":")
	}
	return ""
}

package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"syscall"

	"gopkg.in/yaml.v3"
)

// MaxFileBytes bounds a configuration file; larger files are not read.
const MaxFileBytes = 4 << 20

// ErrUnreadable marks a file that could not be read or parsed as YAML at all,
// as opposed to one that parsed and has findings.
var ErrUnreadable = errors.New("configuration unreadable")

// Document is one loaded configuration file: the effective configuration
// (defaults, then the file, with ${VAR} references resolved) and every
// finding about it.
type Document struct {
	File     string
	Config   *Config
	Findings Findings
	pos      map[string]position
	failed   map[string]bool
	// maskOK: the document's secrets may read as Mask (Options.MaskedSecrets).
	maskOK bool
}

// Options adjust loading.
type Options struct {
	// Env resolves ${VAR} references; os.LookupEnv when nil.
	Env LookupEnv
	// UnsetEnvWarns makes a reference to a variable that is not set a
	// warning, the value left at its default and not judged further,
	// instead of an error. Checking a file elsewhere than where the router
	// runs (CI, which rarely holds the router's secrets) judges the file,
	// not that machine's environment; serving and reloading keep the
	// error, since the value would be wrong.
	UnsetEnvWarns bool
	// NoEnvRefs refuses every ${VAR} reference (an error naming it): for
	// a document that comes over the network (an admin import), where
	// reading the router's environment into it would show that
	// environment to whoever sent it (in a finding, or a value read back).
	NoEnvRefs bool
	// MaskedSecrets lets secrets read as Mask: a document read back from
	// GET /admin/config and imported, whose masked secrets keep their
	// running values (Config.Unmask). Anywhere else a secret that is the
	// mask is an error: a file saved from `config show` would otherwise
	// make the mask, which anyone can read, the admin token or the key
	// sent to a backend.
	MaskedSecrets bool
}

// Load reads, decodes and validates the file at path. The error is non-nil
// (and wraps ErrUnreadable) only when the file cannot be read or is not YAML;
// everything else is a finding in the returned document.
func Load(path string, opts Options) (*Document, error) {
	data, err := ReadFile(path, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnreadable, err)
	}
	return Parse(path, data, opts)
}

// ReadFile reads the regular file at path, at most limit bytes (a larger
// file is an error, not cut short). The file is opened without blocking
// and refused unless regular: a FIFO's open would otherwise wait for a
// writer, past any signal a command handles, and a directory or device is
// never a configuration, tokenizer or template. Errors name the path once.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		what := "not a regular file"
		if st.IsDir() {
			what = "a directory"
		}
		return nil, fmt.Errorf("%s is %s", path, what)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}

// Empty reports whether data holds no configuration at all: nothing but
// white space and comments, or a document that is null ("---", "~"). Such
// a document is every default, which a reload never means: a file being
// rewritten, a request sent without its body.
func Empty(data []byte) bool {
	var root yaml.Node
	switch err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&root); {
	case errors.Is(err, io.EOF):
		return true
	case err != nil:
		return false
	}
	return len(root.Content) == 1 && root.Content[0].Kind == yaml.ScalarNode && root.Content[0].Tag == "!!null"
}

// Parse decodes and validates YAML read from the named file.
func Parse(name string, data []byte, opts Options) (*Document, error) {
	env := opts.Env
	if env == nil {
		env = os.LookupEnv
	}
	doc := &Document{File: name, Config: DefaultFor(env)}
	dec := &decoder{file: name, env: env, unsetWarns: opts.UnsetEnvWarns, noRefs: opts.NoEnvRefs, pos: map[string]position{}, failed: map[string]bool{}}

	yd := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	switch err := yd.Decode(&root); {
	case errors.Is(err, io.EOF):
		// An empty file is the default configuration.
	case err != nil:
		return nil, fmt.Errorf("%w: %s: %s", ErrUnreadable, name, strings.TrimPrefix(err.Error(), "yaml: "))
	default:
		var extra yaml.Node
		if err := yd.Decode(&extra); err == nil {
			dec.errorf(&extra, "", "a configuration file holds one YAML document; remove the extra '---' document")
		} else if !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %s: %s", ErrUnreadable, name, strings.TrimPrefix(err.Error(), "yaml: "))
		}
		top := &root
		if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
			top = root.Content[0]
		}
		err := dec.decode(top, reflect.ValueOf(doc.Config).Elem(), "")
		if err == nil {
			err = dec.fatal // met on the last values, after which no decode looked
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrUnreadable, name, err)
		}
	}
	doc.pos = dec.pos
	doc.failed = dec.failed
	doc.maskOK = opts.MaskedSecrets
	doc.Findings = dec.findings
	more, dropped := validate(doc)
	doc.Findings = append(doc.Findings, more...)
	sortFindings(doc.Findings)
	dropped.add(dec.dropped)
	if f := dropped.summary(name); f != nil {
		doc.Findings = append(doc.Findings, *f)
	}
	return doc, nil
}

// position returns where path (or its nearest written ancestor) stands in
// the file; 1:1 when nothing of it was written.
func (d *Document) position(path string) position {
	for {
		if p, ok := d.pos[path]; ok {
			return p
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			if p, ok := d.pos[""]; ok {
				return p
			}
			return position{1, 1}
		}
		path = path[:i]
	}
}

// Has reports whether the file wrote path (a key present, even if null).
func (d *Document) Has(path string) bool {
	_, ok := d.pos[path]
	return ok
}

// Validate applies every rule to a configuration built in code (from flags,
// say). Findings carry paths; positions are 1:1 and the file is name.
func Validate(name string, c *Config) Findings {
	doc := &Document{File: name, Config: c, pos: map[string]position{}, failed: map[string]bool{}}
	fs, _ := validate(doc)
	sortFindings(fs)
	return fs
}

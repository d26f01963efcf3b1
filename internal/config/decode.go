package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// maxNodes bounds the YAML nodes one load visits, aliases included, so a
// document of nested aliases cannot make decoding exponential.
const maxNodes = 200_000

// MaxFindings bounds the findings reported for one file; the rest are
// summarised in one last finding.
const MaxFindings = 500

// quote renders a value from the file for a message, cut to 64 bytes.
func quote(s string) string {
	const limit = 64
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// clip bounds a message or path built from values in the file.
func clip(s string) string {
	const limit = 1024
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

var errTooManyNodes = errors.New("document too large: more than 200000 YAML nodes after expanding aliases")

// maxExpandedBytes bounds the text ${VAR} references (and $${ escapes)
// produce in one document, aliases of one value counted once: variables'
// values are not bounded by the file's size.
const maxExpandedBytes = 4 * MaxFileBytes

var errTooMuchExpanded = fmt.Errorf("document too large: its ${...} references expand to more than %d bytes", maxExpandedBytes)

type position struct{ line, col int }

// decoder walks a YAML node tree into the typed schema, recording the
// position of every path it sees and a finding for everything it rejects.
type decoder struct {
	file       string
	env        LookupEnv
	unsetWarns bool // Options.UnsetEnvWarns
	noRefs     bool // Options.NoEnvRefs
	pos        map[string]position
	failed     map[string]bool // paths whose value was rejected while decoding
	dropped    droppedFindings // findings past MaxFindings
	findings   Findings
	visited    int
	// expanded holds each interpolated scalar's text once, so that the
	// aliases of one value share it; expandedBytes is their total, and
	// fatal the error that ends the decode once it passes its bound.
	expanded      map[*yaml.Node]string
	expandedBytes int
	fatal         error
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	d.add(SeverityError, n, path, format, args...)
}

// add records a finding about a value the decoder did not set; the
// validator says nothing more about its path.
func (d *decoder) add(sev Severity, n *yaml.Node, path, format string, args ...any) {
	d.failed[path] = true
	d.dropped.admit(&d.findings, nil, 0, Finding{
		Severity: sev, Path: clip(path), Message: clip(fmt.Sprintf(format, args...)),
		File: d.file, Line: n.Line, Column: n.Column,
	})
}

func (d *decoder) mark(n *yaml.Node, path string) {
	if _, ok := d.pos[path]; !ok {
		d.pos[path] = position{n.Line, n.Column}
	}
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 64; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// decode fills v from n. A null node leaves v as it is (its default).
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) error {
	d.visited++
	if d.visited > maxNodes {
		return errTooManyNodes
	}
	if d.fatal != nil {
		return d.fatal
	}
	n = resolveAlias(n)
	d.mark(n, path)
	if isNull(n) {
		return nil
	}
	t := v.Type()
	switch {
	case t == durationType:
		s, ok := d.scalarText(n, path, "a duration such as \"500ms\" or \"30s\"")
		if !ok {
			return nil
		}
		dur, err := time.ParseDuration(s)
		if err != nil {
			d.errorf(n, path, "%s is not a duration: write a number with a unit, such as \"500ms\", \"30s\" or \"5m\"", quote(s))
			return nil
		}
		v.SetInt(int64(dur))
		return nil
	case t.Kind() == reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
			// An optional block that is present starts from its defaults.
			if def, ok := v.Interface().(interface{ setDefaults() }); ok {
				def.setDefaults()
			}
		}
		return d.decode(n, v.Elem(), path)
	}
	switch t.Kind() {
	case reflect.Struct:
		return d.decodeStruct(n, v, path)
	case reflect.Slice:
		return d.decodeSlice(n, v, path)
	case reflect.Map:
		return d.decodeMap(n, v, path)
	case reflect.String:
		if s, ok := d.scalarText(n, path, "a string"); ok {
			v.SetString(s)
		}
	case reflect.Bool:
		s, ok := d.scalarText(n, path, "true or false")
		if !ok {
			return nil
		}
		switch s {
		case "true", "True", "TRUE":
			v.SetBool(true)
		case "false", "False", "FALSE":
			v.SetBool(false)
		default:
			d.errorf(n, path, "%s is not a boolean: write true or false", quote(s))
		}
	case reflect.Int, reflect.Int64:
		s, ok := d.scalarText(n, path, "an integer")
		if !ok {
			return nil
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
		if err != nil || (t.Kind() == reflect.Int && (i > math.MaxInt32 || i < math.MinInt32)) {
			d.errorf(n, path, "%s is not a decimal integer in range", quote(s))
			return nil
		}
		v.SetInt(i)
	case reflect.Float64:
		s, ok := d.scalarText(n, path, "a number")
		if !ok {
			return nil
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.errorf(n, path, "%s is not a finite number", quote(s))
			return nil
		}
		v.SetFloat(f)
	default:
		return fmt.Errorf("config schema: unsupported field type %s at %s", t, path)
	}
	return nil
}

// scalarText returns the text of a scalar node with ${VAR} references
// resolved, or records a finding and returns false.
func (d *decoder) scalarText(n *yaml.Node, path, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "expected %s, found %s", want, kindName(n))
		return "", false
	}
	if s, ok := d.expanded[n]; ok {
		return s, true
	}
	env := d.env
	if d.noRefs {
		env = func(string) (string, bool) { return "", false }
	}
	s, err := interpolate(n.Value, env)
	if err == nil && strings.Contains(n.Value, "${") {
		// A new string: kept for the node's other aliases, and counted.
		if d.expandedBytes += len(s); d.expandedBytes > maxExpandedBytes {
			d.fatal = errTooMuchExpanded
			return "", false
		}
		if d.expanded == nil {
			d.expanded = map[*yaml.Node]string{}
		}
		d.expanded[n] = s
	}
	var unset *unsetVarError
	if d.noRefs && errors.As(err, &unset) {
		d.errorf(n, path, "${%s}: a document sent to the admin API reads no environment variables; give the value", unset.name)
		return "", false
	}
	switch {
	case err != nil && d.unsetWarns && errors.As(err, &unset):
		d.add(SeverityWarning, n, path, "%v here: the value is not checked, and continuum serve refuses the file unless it is set where the router runs", err)
		return "", false
	case err != nil:
		d.errorf(n, path, "%v", err)
		return "", false
	}
	return s, true
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		// Not quoted: a block that holds a secret (api_keys, etcd.auth,
		// admin) written as one value would have its secret in the
		// finding, which CI logs and the admin API show.
		return "a single value"
	}
	return "an unsupported YAML node"
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping, found %s", kindName(n))
		return nil
	}
	fields := fieldsOf(v.Type())
	ps, err := d.pairs(n, path, map[*yaml.Node]bool{})
	if err != nil {
		return err
	}
	// Every pair counts, merged ones too: a mapping of many keys merged
	// into many others is as large as the mappings it makes.
	if d.visited += len(ps); d.visited > maxNodes {
		return errTooManyNodes
	}
	seen := map[string]bool{}
	for _, p := range ps {
		k, val := p.k, p.v
		key := k.Value
		fp := joinPath(path, key)
		f, ok := fields.byName[key]
		if !ok && path == "" && strings.HasPrefix(key, "x-") {
			continue // extension keys hold YAML anchors
		}
		if !ok {
			msg := fmt.Sprintf("unknown key %s", quote(key))
			if s := suggest(key, fields.names); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			} else if path == "" {
				msg += "; top-level keys are " + strings.Join(fields.names, ", ")
			}
			d.errorf(k, fp, "%s", msg)
			continue
		}
		if seen[key] {
			d.errorf(k, fp, "key %q is given twice in this mapping; keep one", key)
			continue
		}
		seen[key] = true
		// A block under a key is reported at the key; a scalar at its value.
		if rv := resolveAlias(val); rv.Kind == yaml.MappingNode || rv.Kind == yaml.SequenceNode {
			d.mark(k, fp)
		}
		if err := d.decode(val, v.Field(f), fp); err != nil {
			return err
		}
	}
	return nil
}

type pair struct{ k, v *yaml.Node }

// pairs returns the key/value pairs of a mapping with "<<" merge keys
// expanded as YAML specifies: the mapping's own keys first, then merged keys
// it does not set itself, earlier merge sources winning over later ones.
// active holds the mappings being expanded, so a merge cycle ends.
func (d *decoder) pairs(n *yaml.Node, path string, active map[*yaml.Node]bool) ([]pair, error) {
	if active[n] {
		d.errorf(n, path, "a merge key (<<) refers to a mapping that contains it")
		return nil, nil
	}
	active[n] = true
	defer delete(active, n)
	var own []pair
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		switch {
		case k.Kind == yaml.ScalarNode && k.Tag == "!!merge":
			merges = append(merges, resolveAlias(val))
		case k.Kind != yaml.ScalarNode:
			d.errorf(k, path, "mapping keys must be plain strings")
		default:
			own = append(own, pair{k, val})
		}
	}
	if len(merges) == 0 {
		return own, nil
	}
	seen := make(map[string]bool, len(own))
	for _, p := range own {
		seen[p.k.Value] = true
	}
	out := own
	for _, m := range merges {
		sources := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			sources = m.Content
		}
		for _, src := range sources {
			src = resolveAlias(src)
			d.visited++
			if d.visited > maxNodes {
				return nil, errTooManyNodes
			}
			if src.Kind != yaml.MappingNode {
				d.errorf(src, path, "a merge key (<<) takes a mapping or a list of mappings")
				continue
			}
			sub, err := d.pairs(src, path, active)
			if err != nil {
				return nil, err
			}
			for _, p := range sub {
				if !seen[p.k.Value] {
					seen[p.k.Value] = true
					out = append(out, p)
				}
			}
		}
	}
	return out, nil
}

func (d *decoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "expected a list, found %s", kindName(n))
		return nil
	}
	if d.visited+len(n.Content) > maxNodes {
		return errTooManyNodes
	}
	out := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		elem := out.Index(i)
		if def, ok := elem.Addr().Interface().(interface{ setDefaults() }); ok {
			def.setDefaults()
		}
		if err := d.decode(item, elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	v.Set(out)
	return nil
}

func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping, found %s", kindName(n))
		return nil
	}
	out := reflect.MakeMap(v.Type())
	ps, err := d.pairs(n, path, map[*yaml.Node]bool{})
	if err != nil {
		return err
	}
	for _, p := range ps {
		fp := mapEntryPath(path, p.k.Value)
		d.mark(p.k, fp)
		if out.MapIndex(reflect.ValueOf(p.k.Value)).IsValid() {
			d.errorf(p.k, fp, "key %s is given twice in this mapping; keep one", quote(p.k.Value))
			continue
		}
		elem := reflect.New(v.Type().Elem()).Elem()
		if err := d.decode(p.v, elem, fp); err != nil {
			return err
		}
		out.SetMapIndex(reflect.ValueOf(p.k.Value), elem)
	}
	v.Set(out)
	return nil
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func mapEntryPath(parent, key string) string {
	if key != "" && !strings.ContainsAny(key, ".[]\"' \t") {
		return joinPath(parent, key)
	}
	return parent + "[" + strconv.Quote(key) + "]"
}

var durationType = reflect.TypeFor[Duration]()

type structFields struct {
	byName map[string]int
	names  []string
}

var fieldCache sync.Map // reflect.Type -> *structFields

func fieldsOf(t reflect.Type) *structFields {
	if c, ok := fieldCache.Load(t); ok {
		return c.(*structFields)
	}
	sf := &structFields{byName: map[string]int{}}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		sf.byName[name] = i
		sf.names = append(sf.names, name)
	}
	fieldCache.Store(t, sf)
	return sf
}

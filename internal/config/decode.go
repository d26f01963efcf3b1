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

	"gopkg.in/yaml.v3"
)

// maxNodes bounds the YAML nodes one load visits, aliases included, so a
// document of nested aliases cannot make decoding exponential.
const maxNodes = 200_000

var errTooManyNodes = errors.New("document too large: more than 200000 YAML nodes after expanding aliases")

type position struct{ line, col int }

// decoder walks a YAML node tree into the typed schema, recording the
// position of every path it sees and a finding for everything it rejects.
type decoder struct {
	file     string
	env      LookupEnv
	pos      map[string]position
	failed   map[string]bool // paths whose value was rejected while decoding
	findings Findings
	visited  int
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	d.failed[path] = true
	d.findings = append(d.findings, Finding{
		Severity: SeverityError, Path: path, Message: fmt.Sprintf(format, args...),
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
			d.errorf(n, path, "%q is not a duration: write a number with a unit, such as \"500ms\", \"30s\" or \"5m\"", s)
			return nil
		}
		v.SetInt(int64(dur))
		return nil
	case t.Kind() == reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
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
		case "true":
			v.SetBool(true)
		case "false":
			v.SetBool(false)
		default:
			d.errorf(n, path, "%q is not a boolean: write true or false", s)
		}
	case reflect.Int, reflect.Int64:
		s, ok := d.scalarText(n, path, "an integer")
		if !ok {
			return nil
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
		if err != nil || (t.Kind() == reflect.Int && (i > math.MaxInt32 || i < math.MinInt32)) {
			d.errorf(n, path, "%q is not an integer in range", s)
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
			d.errorf(n, path, "%q is not a finite number", s)
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
	s, err := interpolate(n.Value, d.env)
	if err != nil {
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
		return fmt.Sprintf("the scalar %q", n.Value)
	}
	return "an unsupported YAML node"
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping, found %s", kindName(n))
		return nil
	}
	fields := fieldsOf(v.Type())
	seen := map[string]bool{}
	return d.eachPair(n, func(k, val *yaml.Node) error {
		key := k.Value
		fp := joinPath(path, key)
		f, ok := fields.byName[key]
		if !ok && path == "" && strings.HasPrefix(key, "x-") {
			return nil // extension keys hold YAML anchors
		}
		if !ok {
			msg := fmt.Sprintf("unknown key %q", key)
			if s := suggest(key, fields.names); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			} else if path == "" {
				msg += "; top-level keys are " + strings.Join(fields.names, ", ")
			}
			d.errorf(k, fp, "%s", msg)
			return nil
		}
		if seen[key] {
			d.errorf(k, fp, "key %q is given twice in this mapping; keep one", key)
			return nil
		}
		seen[key] = true
		// A block under a key is reported at the key; a scalar at its value.
		if rv := resolveAlias(val); rv.Kind == yaml.MappingNode || rv.Kind == yaml.SequenceNode {
			d.mark(k, fp)
		}
		return d.decode(val, v.Field(f), fp)
	})
}

// eachPair visits the key/value pairs of a mapping, expanding "<<" merge
// keys in front of the mapping's own pairs.
func (d *decoder) eachPair(n *yaml.Node, fn func(k, v *yaml.Node) error) error {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			val = resolveAlias(val)
			merged := []*yaml.Node{val}
			if val.Kind == yaml.SequenceNode {
				merged = val.Content
			}
			for _, m := range merged {
				m = resolveAlias(m)
				if m.Kind != yaml.MappingNode {
					continue
				}
				d.visited++
				if d.visited > maxNodes {
					return errTooManyNodes
				}
				if err := d.eachPair(m, fn); err != nil {
					return err
				}
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, "", "mapping keys must be plain strings")
			continue
		}
		if err := fn(k, val); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "expected a list, found %s", kindName(n))
		return nil
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
	err := d.eachPair(n, func(k, val *yaml.Node) error {
		fp := mapEntryPath(path, k.Value)
		d.mark(k, fp)
		if out.MapIndex(reflect.ValueOf(k.Value)).IsValid() {
			d.errorf(k, fp, "key %q is given twice in this mapping; keep one", k.Value)
			return nil
		}
		elem := reflect.New(v.Type().Elem()).Elem()
		if err := d.decode(val, elem, fp); err != nil {
			return err
		}
		out.SetMapIndex(reflect.ValueOf(k.Value), elem)
		return nil
	})
	v.Set(out)
	return err
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

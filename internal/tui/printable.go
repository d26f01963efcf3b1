package tui

import (
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"
)

// escaped returns a deep copy of v (a pointer, struct, slice, array, map
// or string) in which every exported string (struct fields, slice and map
// elements, map keys) has its control characters escaped. The router's
// answers carry fleet strings (model, namespace and component names,
// record keys, problem reasons): top draws them on the terminal, where raw
// they could clear the screen, retitle the window or break a row. The
// snapshot itself stays as the router sent it, for the JSON document,
// whose encoder escapes what a reader needs escaped.
func escaped(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		n := reflect.New(v.Type().Elem())
		n.Elem().Set(escaped(v.Elem()))
		return n
	case reflect.Struct:
		n := reflect.New(v.Type()).Elem()
		n.Set(v)
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				n.Field(i).Set(escaped(v.Field(i)))
			}
		}
		return n
	case reflect.Slice:
		if v.IsNil() || v.Type().Elem().Kind() == reflect.Uint8 {
			return v // raw JSON or bytes, never drawn as text
		}
		n := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			n.Index(i).Set(escaped(v.Index(i)))
		}
		return n
	case reflect.Array:
		n := reflect.New(v.Type()).Elem()
		for i := range v.Len() {
			n.Index(i).Set(escaped(v.Index(i)))
		}
		return n
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		n := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			n.SetMapIndex(escaped(it.Key()), escaped(it.Value()))
		}
		return n
	case reflect.String:
		return reflect.ValueOf(printable(v.String())).Convert(v.Type())
	}
	return v
}

// escapedSnapshot is s with every string escaped for the terminal.
func escapedSnapshot(s *Snapshot) *Snapshot {
	return escaped(reflect.ValueOf(s)).Interface().(*Snapshot)
}

// printable returns s with control characters (C0, DEL, C1), the Unicode
// line and paragraph separators and the bidirectional overrides written as
// Go escapes, and invalid UTF-8 as \ufffd.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unprintable(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == utf8.RuneError:
			b.WriteString(`\ufffd`)
		case unprintable(r) && r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unprintable(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func unprintable(r rune) bool {
	return r < 0x20 || r >= 0x7f && r < 0xa0 || r == 0x2028 || r == 0x2029 ||
		r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}

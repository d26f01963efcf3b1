package tui

import (
	"reflect"

	"github.com/continuum-router/continuum/internal/iostreams"
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
		return reflect.ValueOf(iostreams.Printable(v.String())).Convert(v.Type())
	}
	return v
}

// escapedSnapshot is s with every string escaped for the terminal.
func escapedSnapshot(s *Snapshot) *Snapshot {
	return escaped(reflect.ValueOf(s)).Interface().(*Snapshot)
}

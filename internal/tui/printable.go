package tui

import (
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"
)

// escapeStrings rewrites, in place, every exported string that v points to
// (struct fields, slice and map elements, map keys) with its control
// characters escaped. The router's answers carry fleet strings (model,
// namespace and component names, record keys, problem reasons): top draws
// them on the terminal, where raw they could clear the screen, retitle the
// window or break a row.
func escapeStrings(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			escapeStrings(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				escapeStrings(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // raw JSON or bytes, never drawn as text
		}
		for i := range v.Len() {
			escapeStrings(v.Index(i))
		}
	case reflect.Map:
		if v.IsNil() {
			return
		}
		keys := v.MapKeys()
		for _, k := range keys {
			val := reflect.New(v.Type().Elem()).Elem()
			val.Set(v.MapIndex(k))
			escapeStrings(val)
			nk := k
			if k.Kind() == reflect.String {
				nk = reflect.ValueOf(printable(k.String())).Convert(k.Type())
				if nk.String() != k.String() {
					v.SetMapIndex(k, reflect.Value{})
				}
			}
			v.SetMapIndex(nk, val)
		}
	case reflect.String:
		if v.CanSet() {
			v.SetString(printable(v.String()))
		}
	}
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

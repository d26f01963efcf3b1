package config

import (
	"fmt"
	"reflect"
	"strings"
)

// Mask is what secrets are replaced with in output.
const Mask = "********"

// Masked returns a deep copy of c in which every secret field (etcd
// client_key and auth.password, backend api_key, the admin token, the
// server's and the event bus's TLS keys) that is set reads as Mask.
// Certificates are shown as they are. Absent lists and maps are empty in
// the copy, so they print as [] and {}.
func (c *Config) Masked() *Config {
	out := reflect.New(reflect.TypeOf(*c)).Elem()
	copyMasked(out, reflect.ValueOf(*c), false)
	cfg := out.Interface().(Config)
	return &cfg
}

func copyMasked(dst, src reflect.Value, secret bool) {
	switch src.Kind() {
	case reflect.Struct:
		t := src.Type()
		for i := range src.NumField() {
			copyMasked(dst.Field(i), src.Field(i), t.Field(i).Tag.Get("secret") == "true")
		}
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		p := reflect.New(src.Type().Elem())
		copyMasked(p.Elem(), src.Elem(), secret)
		dst.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
		for i := range src.Len() {
			copyMasked(s.Index(i), src.Index(i), secret)
		}
		dst.Set(s)
	case reflect.Map:
		m := reflect.MakeMapWithSize(src.Type(), src.Len())
		iter := src.MapRange()
		for iter.Next() {
			m.SetMapIndex(iter.Key(), iter.Value())
		}
		dst.Set(m)
	case reflect.String:
		if secret && src.String() != "" {
			dst.SetString(Mask)
			return
		}
		dst.Set(src)
	default:
		dst.Set(src)
	}
}

// Unmask gives every secret of c that reads as Mask the value of the same
// secret in running, so that a configuration read back from GET
// /admin/config can be imported without its secrets. List entries are
// matched by name when they have one (backends), else by position. It
// returns the paths it filled; a masked secret with nothing to take its
// value from stays Mask (and is rejected where a secret must be real).
func (c *Config) Unmask(running *Config) []string {
	var filled []string
	unmask(reflect.ValueOf(c).Elem(), reflect.ValueOf(running).Elem(), "", false, &filled)
	return filled
}

// StillMasked lists the secrets of c that still read as Mask: ones an import
// left masked that Unmask had no running value for (a backend whose url
// changed, say). Such a configuration would send the mask as a secret.
func (c *Config) StillMasked() []string {
	var left []string
	masked(reflect.ValueOf(c).Elem(), "", false, &left)
	return left
}

func masked(v reflect.Value, path string, secret bool, left *[]string) {
	switch v.Kind() {
	case reflect.Struct:
		t := v.Type()
		for i := range v.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			masked(v.Field(i), joinPath(path, name), t.Field(i).Tag.Get("secret") == "true", left)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			masked(v.Elem(), path, secret, left)
		}
	case reflect.Slice:
		for i := range v.Len() {
			masked(v.Index(i), fmt.Sprintf("%s[%d]", path, i), secret, left)
		}
	case reflect.String:
		if secret && v.String() == Mask {
			*left = append(*left, path)
		}
	}
}

func unmask(dst, src reflect.Value, path string, secret bool, filled *[]string) {
	switch dst.Kind() {
	case reflect.Struct:
		t := dst.Type()
		for i := range dst.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			unmask(dst.Field(i), src.Field(i), joinPath(path, name), t.Field(i).Tag.Get("secret") == "true", filled)
		}
	case reflect.Pointer:
		if !dst.IsNil() && !src.IsNil() {
			unmask(dst.Elem(), src.Elem(), path, secret, filled)
		}
	case reflect.Slice:
		for i := range dst.Len() {
			if j := matching(dst.Index(i), src, i); j >= 0 {
				unmask(dst.Index(i), src.Index(j), fmt.Sprintf("%s[%d]", path, i), secret, filled)
			}
		}
	case reflect.String:
		if secret && dst.String() == Mask && src.String() != Mask && src.String() != "" {
			dst.SetString(src.String())
			*filled = append(*filled, path)
		}
	}
}

// matching returns the index in list of the entry that corresponds to el,
// the i-th imported entry: the entry of the same name, or the i-th. An
// entry with a URL (a backend) corresponds only to one of the same URL
// too: its running secret (an API key) is never sent to another address
// by an import that left it masked.
func matching(el, list reflect.Value, i int) int {
	if el.Kind() == reflect.Struct {
		if name := el.FieldByName("Name"); name.IsValid() && name.Kind() == reflect.String {
			url := el.FieldByName("URL")
			for j := range list.Len() {
				other := list.Index(j)
				if other.FieldByName("Name").String() != name.String() {
					continue
				}
				if url.IsValid() && url.Kind() == reflect.String && other.FieldByName("URL").String() != url.String() {
					return -1
				}
				return j
			}
			return -1
		}
	}
	if i < list.Len() {
		return i
	}
	return -1
}

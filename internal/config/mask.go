package config

import "reflect"

// Mask is what secrets are replaced with in output.
const Mask = "********"

// Masked returns a deep copy of c in which every secret field (etcd
// client_key and auth.password, backend api_key, the admin token, the event
// bus TLS key) that is set reads as Mask. Certificates are shown as they are.
// Absent lists and maps are empty in the copy, so they print as [] and {}.
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

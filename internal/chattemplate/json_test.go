package chattemplate_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"testing"

	"github.com/continuum-router/continuum/internal/chattemplate"
)

// same reports whether DecodeJSON's value equals encoding/json's decoding
// (UseNumber) of the same input: objects as ordered Dicts with the last
// value of a repeated key, integers as int64, other numbers as float64.
func same(ours, std any) error {
	switch s := std.(type) {
	case nil, bool, string:
		if ours != std {
			return fmt.Errorf("%#v != %#v", ours, std)
		}
	case json.Number:
		if !bytes.ContainsAny([]byte(s), ".eE") {
			i, err := strconv.ParseInt(string(s), 10, 64)
			if err == nil {
				if ours != i {
					return fmt.Errorf("%#v != int %d", ours, i)
				}
				return nil
			}
			// Beyond 64 bits: kept as its text (not as a string value).
			if _, isStr := ours.(string); isStr || fmt.Sprint(ours) != string(s) {
				return fmt.Errorf("%#v != big int %s", ours, s)
			}
			return nil
		}
		f, _ := strconv.ParseFloat(string(s), 64)
		if o, ok := ours.(float64); !ok || (o != f && !(math.IsInf(o, 0) && math.IsInf(f, 0))) {
			return fmt.Errorf("%#v != float %v", ours, f)
		}
	case []any:
		l, ok := ours.(*chattemplate.List)
		if !ok || len(l.Items) != len(s) {
			return fmt.Errorf("list mismatch: %#v vs %#v", ours, std)
		}
		for i := range s {
			if err := same(l.Items[i], s[i]); err != nil {
				return err
			}
		}
	case map[string]any:
		d, ok := ours.(*chattemplate.Dict)
		if !ok || d.Len() != len(s) {
			return fmt.Errorf("object mismatch: %#v vs %#v", ours, std)
		}
		for k, v := range s {
			ov, ok := d.Get(k)
			if !ok {
				return fmt.Errorf("missing key %q", k)
			}
			if err := same(ov, v); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unexpected %T", std)
	}
	return nil
}

func checkDecode(t *testing.T, data []byte) {
	t.Helper()
	ours, err := chattemplate.DecodeJSON(data)
	var std any
	var stdErr error
	if !json.Valid(data) {
		stdErr = fmt.Errorf("invalid JSON")
	} else {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		stdErr = dec.Decode(&std)
	}
	depthOK := true
	if stdErr == nil {
		depthOK = nesting(data) <= chattemplate.MaxJSONDepth
	}
	switch {
	case stdErr != nil && err == nil:
		t.Fatalf("accepted %q that encoding/json rejects (%v)", data, stdErr)
	case stdErr == nil && err != nil && depthOK:
		t.Fatalf("rejected %q: %v", data, err)
	case stdErr == nil && err == nil:
		if e := same(ours, std); e != nil {
			t.Fatalf("%q: %v", data, e)
		}
	}
}

func nesting(data []byte) int {
	depth, maxDepth, inStr, esc := 0, 0, false, false
	for _, c := range data {
		switch {
		case esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case !inStr && (c == '[' || c == '{'):
			depth++
			maxDepth = max(maxDepth, depth)
		case !inStr && (c == ']' || c == '}'):
			depth--
		}
	}
	return maxDepth
}

func TestDecodeJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		`{"b": 1, "a": [1, 2.5, -0, 1e3, -1.5E-3, 12345678901234567890], "c": {"d": null, "e": true, "f": false}}`,
		`"plain"`, `"esc \" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00 \ud800 \ud800\u0041 \udc00"`,
		"\"bad \xff utf8 \xe2\x82\"", `{"k": 1, "k": 2}`, ` [ ] `, `{}`, `0`, `-0.0`,
		`01`, `1.`, `.5`, `+1`, `[1,]`, `{"a" 1}`, `{"a":1,}`, `[1 2]`, "\"ctl \x01\"", `tru`, `nul`, `"\x"`, `"\u12"`, `[`, `{"a":`, `1 2`, ``,
	} {
		checkDecode(t, []byte(s))
	}
	v, err := chattemplate.DecodeJSON([]byte(`{"k": 1, "z": 0, "k": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	d := v.(*chattemplate.Dict)
	if k := d.Keys(); len(k) != 2 || k[0] != "k" || k[1] != "z" {
		t.Fatalf("keys %v", k)
	}
	if got, _ := d.Get("k"); got != int64(2) {
		t.Fatalf("k = %v", got)
	}
}

// FuzzDecodeJSON checks DecodeJSON against encoding/json.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"a": [1, 2.5, "x\u00e9"], "b": {"c": null}}`, `"\ud83d\ude00"`, `[true, false, -1e-5]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
	})
}

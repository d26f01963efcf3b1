package router

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

func TestWithoutClientRouting(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{`{"model":"m","nvext":{"token_data":[1,2,3],"cache_salt":"s"}}`, `{"model":"m","nvext":{"cache_salt":"s"}}`},
		{`{"nvext":{"a":1,"token_data":[1],"b":{"token_data":2}},"z":"<&>"}`, `{"nvext":{"a":1,"b":{"token_data":2}},"z":"<&>"}`},
		{`{"nvext":{"token_data":[1]},"model":"m"}`, `{"model":"m"}`}, // an empty nvext goes
		{` { "model" : "m" , "nvext" : { "token\u005fdata" : "x" , "k" : [ "}" ] } } `, ` {"model" : "m","nvext" : {"k" : [ "}" ]}} `},
		{`{"model":"m","nvext":{"cache_salt":"s"}}`, `{"model":"m","nvext":{"cache_salt":"s"}}`}, // nothing to remove: as sent
		{`{"model":"m","nvext":null}`, `{"model":"m","nvext":null}`},
		{`{"model":"m","nvext":[{"token_data":1}]}`, `{"model":"m","nvext":[{"token_data":1}]}`},
		{`{"model":"m","NVEXT":{"token_data":1},"x":{"nvext":{"token_data":1}}}`, `{"model":"m","NVEXT":{"token_data":1},"x":{"nvext":{"token_data":1}}}`},
		{`{"nvext":{"token_data":1},"nvext":{"token_data":2,"k":"v"}}`, `{"nvext":{"k":"v"}}`},
		{`{"nvext":{"token_data":1},"m":1,"nvext":{"k":"v"}}`, `{"m":1,"nvext":{"k":"v"}}`}, // only the last nvext stays
		{`{"nvext":{"k":1},"nvext":{"token_data":2}}`, `{}`},
		{`{"a":"\"nvext\"","nvext":{"token_data":"\"}"}}`, `{"a":"\"nvext\""}`},
		// The worker choices go too; other routing hints stay.
		{`{"model":"m","nvext":{"backend_instance_id":999,"prefill_worker_id":888,"decode_worker_id":7,"dp_rank":5,"cache_salt":"s","extra_fields":["worker_id"]}}`,
			`{"model":"m","nvext":{"cache_salt":"s","extra_fields":["worker_id"]}}`},
		{`{"model":"m","nvext":{"dp_rank":0}}`, `{"model":"m"}`},
	} {
		if got := string(withoutClientRouting([]byte(tt.in))); got != tt.want {
			t.Errorf("%s\n got  %s\n want %s", tt.in, got, tt.want)
		}
	}
}

// FuzzWithoutClientRouting: for any valid JSON body the result is valid
// JSON with the same members, except that no nvext object holds a member
// a client may not send.
func FuzzWithoutClientRouting(f *testing.F) {
	for _, s := range []string{`{"model":"m","nvext":{"token_data":[1,2],"cache_salt":"s"}}`, `{"nvext":{"token_data":1}}`,
		`{"nvext":{"a":"\\\"","token\u005fdata":{}}}`, `[1]`, `"x"`, `{}`, `{"nvext":{"dp_rank":1,"prefill_worker_id":2}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var before map[string]any
		if json.Unmarshal(body, &before) != nil {
			return // the router refuses bodies that are not JSON objects first
		}
		out := withoutClientRouting(body)
		var after map[string]any
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("%q became invalid: %q: %v", body, out, err)
		}
		if ext, ok := before["nvext"].(map[string]any); ok {
			had := false
			for _, k := range clientNvextKeys {
				if _, ok := ext[k]; ok {
					delete(ext, k)
					had = true
				}
			}
			if had && len(ext) == 0 {
				delete(before, "nvext")
			}
		}
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("%q\n became %q", body, out)
		}
	})
}

// TestWithTokenData: the router's ids go into the last nvext (created when
// there is none), every other member kept as it was.
func TestWithTokenData(t *testing.T) {
	t.Parallel()
	ids := []uint32{1, 22, 4294967295}
	for _, c := range []struct{ in, want string }{
		{`{"model":"m"}`, `{"model":"m","nvext":{"token_data":[1,22,4294967295]}}`},
		{`{}`, `{"nvext":{"token_data":[1,22,4294967295]}}`},
		{` { "model" : "m" , "nvext" : { "cache_salt" : "s" } } `, ` {"model" : "m","nvext" : {"token_data":[1,22,4294967295],"cache_salt" : "s"}} `},
		{`{"nvext":{},"x":1}`, `{"nvext":{"token_data":[1,22,4294967295]},"x":1}`},
		{`{"nvext":null}`, `{"nvext":{"token_data":[1,22,4294967295]}}`},
		{`{"nvext":{"a":1},"nvext":{"b":2}}`, `{"nvext":{"a":1},"nvext":{"token_data":[1,22,4294967295],"b":2}}`},
	} {
		got := string(withTokenData([]byte(c.in), ids))
		if got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.in, got, c.want)
		}
		var v struct {
			Nvext struct {
				TokenData []uint32 `json:"token_data"`
			} `json:"nvext"`
		}
		if err := json.Unmarshal([]byte(got), &v); err != nil || !slices.Equal(v.Nvext.TokenData, ids) {
			t.Errorf("%s: decodes to %v (%v)", got, v.Nvext.TokenData, err)
		}
	}
}

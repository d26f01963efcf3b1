package router

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
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
		{`{"model":"m","nvext":{"backend_instance_id":999,"prefill_worker_id":888,"decode_worker_id":7,"dp_rank":5,"prefill_dp_rank":1,"cache_salt":"s","extra_fields":["timing"]}}`,
			`{"model":"m","nvext":{"cache_salt":"s","extra_fields":["timing"]}}`},
		{`{"model":"m","nvext":{"dp_rank":0}}`, `{"model":"m"}`},
		{`{"model":"m","nvext":{"prefill_dp_rank":0}}`, `{"model":"m"}`},
		// Asking the frontend for its own choice of worker instead of an
		// answer: the annotation goes, the others stay as written.
		{`{"nvext":{"annotations":[ "a" , "query_instance_id:1", "query_instance_id_x", 3 ,"query\u005finstance_id:"]}}`,
			`{"nvext":{"annotations":["a","query_instance_id_x",3]}}`},
		{`{"nvext":{"annotations":["query_instance_id:"]}}`, `{"nvext":{"annotations":[]}}`},
		{`{"nvext":{"annotations":"query_instance_id:"}}`, `{"nvext":{"annotations":"query_instance_id:"}}`},
		// The frontend names the workers in the answer only for a client
		// that sent x-backend.
		{`{"nvext":{"extra_fields":["timing","worker_id","worker\u005fid","routed_experts"]}}`,
			`{"nvext":{"extra_fields":["timing","routed_experts"]}}`},
		{`{"nvext":{"extra_fields":["worker_id"],"extra_fields":["worker_id"]}}`, `{"nvext":{"extra_fields":[],"extra_fields":[]}}`},
	} {
		if got := string(withoutClientRouting([]byte(tt.in), false)); got != tt.want {
			t.Errorf("%s\n got  %s\n want %s", tt.in, got, tt.want)
		}
	}
	// With x-backend the extra_fields stay as sent; the rest goes as before.
	for _, tt := range []struct{ in, want string }{
		{`{"nvext":{"extra_fields":["timing","worker_id"]}}`, `{"nvext":{"extra_fields":["timing","worker_id"]}}`},
		{`{"nvext":{"extra_fields":["worker_id"],"dp_rank":1,"annotations":["query_instance_id:7"]}}`, `{"nvext":{"extra_fields":["worker_id"],"annotations":[]}}`},
	} {
		if got := string(withoutClientRouting([]byte(tt.in), true)); got != tt.want {
			t.Errorf("x-backend: %s\n got  %s\n want %s", tt.in, got, tt.want)
		}
	}
}

// FuzzWithoutClientRouting: for any valid JSON body the result is valid
// JSON with the same members, except that no nvext object holds a member
// a client may not send, nor an annotation or (without x-backend) an
// extra field it may not ask for.
func FuzzWithoutClientRouting(f *testing.F) {
	for _, s := range []string{`{"model":"m","nvext":{"token_data":[1,2],"cache_salt":"s"}}`, `{"nvext":{"token_data":1}}`,
		`{"nvext":{"a":"\\\"","token\u005fdata":{}}}`, `[1]`, `"x"`, `{}`, `{"nvext":{"dp_rank":1,"prefill_worker_id":2}}`,
		`{"nvext":{"annotations":["query_instance_id:1",{}],"extra_fields":["worker_id","timing"]}}`} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, reveal bool) {
		var before map[string]any
		if json.Unmarshal(body, &before) != nil {
			return // the router refuses bodies that are not JSON objects first
		}
		out := withoutClientRouting(body, reveal)
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
			drop := func(k string, gone func(string) bool) {
				if a, ok := ext[k].([]any); ok {
					ext[k] = slices.DeleteFunc(a, func(v any) bool { s, ok := v.(string); return ok && gone(s) })
				}
			}
			drop("annotations", func(s string) bool { return strings.HasPrefix(s, queryInstanceAnnotation) })
			if !reveal {
				drop("extra_fields", func(s string) bool { return s == workerIDField })
			}
		}
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("%q\n became %q", body, out)
		}

		// Then the router's ids: they are what a decoder reads as
		// nvext.token_data, and the rest reads as it did.
		ids := []uint32{uint32(len(body)), 0, 4294967295}
		with := withTokenData(out, ids)
		var got map[string]any
		if err := json.Unmarshal(with, &got); err != nil {
			t.Fatalf("%q with token data became invalid: %q: %v", out, with, err)
		}
		ext, _ := got["nvext"].(map[string]any)
		if want := []any{float64(ids[0]), float64(ids[1]), float64(ids[2])}; !reflect.DeepEqual(ext["token_data"], want) {
			t.Fatalf("%q with token data: %q", out, with)
		}
		delete(ext, "token_data")
		if had, ok := after["nvext"].(map[string]any); ok {
			after["nvext"] = had
		} else {
			after["nvext"] = map[string]any{}
		}
		if !reflect.DeepEqual(got, after) {
			t.Fatalf("%q with token data: %q", out, with)
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

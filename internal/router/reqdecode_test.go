package router

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// requestBodies are inference bodies, plain and not, for the tests and the
// fuzzer's seeds.
var requestBodies = []string{
	`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	` { "model" : "llama-3.1-8b" , "stream" : true , "max_tokens" : 16 , "messages" : [ { "role" : "system" , "content" : "be brief" } , { "role" : "user" , "content" : [ {"type":"text","text":"a\u00e9\n"} ] } ] } `,
	`{"model":"m","prompt":"once upon","stream":false,"temperature":0.7,"top_p":1e-3,"n":-1}`,
	`{"model":"m","prompt":["a","b"],"nvext":{"backend_instance_id":3}}`,
	`{"model":"m","messages":[]}`,
	`{"model":"m","messages":null,"prompt":null,"nvext":null,"stream":null}`,
	`{"model":"m","messages":[{"content":null},{"role":"assistant"},{"content":{"a":[1,2,{"b":false}]}}]}`,
	`{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}]}`,
	`{"model":"mødel-ünïcode","messages":[]}`,
	`{"model":"a\"b"}`,
	`{"Model":"m"}`,
	`{"MODEL":"m","model":"n"}`,
	`{"model":"m","model":"n"}`,
	`{"model":"m","messages":[{"Content":"x"}]}`,
	`{"model":"m","messages":[{"content":"x","content":"y"}]}`,
	`{"model":"m","messages":["not an object"]}`,
	`{"model":"m","messages":[null]}`,
	`{"model":"m","stream":"yes"}`,
	`{"model":1}`,
	`{"model":"m",}`,
	`{"model":"m"} trailing`,
	`{"model":"m","x":01}`,
	`{"model":"m","x":"\x01"}`,
	`{"model":"m","x":"\q"}`,
	`{"model":"m","x":"\u12"}`,
	`{"model":"m","x":1.}`,
	`{"model":"m","x":-}`,
	`{"model":"m","x":[1,]}`,
	`{"model":"m","x":tru}`,
	`{"model":"\xff"}`,
	`{"model":"m","x":"\xff"}`,
	`{"m\u006fdel":"m"}`,
	"\ufeff{\"model\":\"m\"}",
	`[]`,
	``,
	`{"model":"m","x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
	`{"":1,"model":"m"}`,
}

// TestDecodeRequestMatchesJSON: what decodeRequest decodes is what
// json.Unmarshal decodes from the same body, error or not, and the common
// bodies are decoded without it.
func TestDecodeRequestMatchesJSON(t *testing.T) {
	t.Parallel()
	plain := 0
	for _, body := range requestBodies {
		if checkDecodeRequest(t, []byte(body)) {
			plain++
		}
	}
	if plain < 8 {
		t.Fatalf("only %d bodies were decoded without encoding/json", plain)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, body := range requestBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkDecodeRequest(t, body) })
}

// checkDecodeRequest decodes body both ways and fails t where they
// differ; it reports whether the body was decoded without encoding/json.
func checkDecodeRequest(t *testing.T, body []byte) bool {
	t.Helper()
	var want request
	werr := decodeExact(body, &want)
	var plain request
	ok := decodePlainRequest(body, &plain)
	if ok && werr != nil {
		t.Fatalf("%q: decoded as plain, encoding/json refuses it: %v", body, werr)
	}
	if ok && !reflect.DeepEqual(plain, want) {
		t.Fatalf("%q:\n got %+v\nwant %+v", body, plain, want)
	}
	var got request
	gerr := decodeRequest(body, &got)
	if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
		t.Fatalf("%q: error %v, encoding/json %v", body, gerr, werr)
	}
	if gerr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %+v\nwant %+v", body, got, want)
	}
	if gerr == nil {
		// The prompt is read in place as encoding/json would read it.
		if text, ref := got.promptText(), promptTextRef(&got); text != ref {
			t.Fatalf("%q: prompt text %q, encoding/json reads %q", body, text, ref)
		}
		if n, ref := got.promptIDs(), promptIDsRef(&got); n != ref {
			t.Fatalf("%q: %d prompt ids, encoding/json reads %d", body, n, ref)
		}
	}
	return ok
}

func BenchmarkDecodeRequest(b *testing.B) {
	body := []byte(`{"model":"bench","stream":false,"max_tokens":16,"messages":[{"role":"system","content":"You are brief."},{"role":"user","content":"Say something short."}]}`)
	for _, impl := range []struct {
		name   string
		decode func([]byte, *request) error
	}{{"encoding_json", func(b []byte, q *request) error { return json.Unmarshal(b, q) }}, {"router", decodeRequest}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var q request
				if err := impl.decode(body, &q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestDecodeRawClipped: the raw members share the body's bytes with their
// capacity clipped, so that appending to one never writes the body.
func TestDecodeRawClipped(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"m","messages":[{"content":"a"},{"content":"b"}],"prompt":"p","nvext":{}}`)
	orig := string(body)
	var q request
	if !decodePlainRequest(body, &q) {
		t.Fatal("not decoded as plain")
	}
	for _, raw := range []json.RawMessage{q.Messages[0].Content, q.Messages[1].Content, q.Prompt, q.Nvext} {
		if cap(raw) != len(raw) {
			t.Fatalf("%s: capacity %d past its length %d", raw, cap(raw), len(raw))
		}
		_ = append(raw, 'X')
	}
	if string(body) != orig {
		t.Fatalf("the body changed: %s", body)
	}
}

// TestPromptIDsCounted: a prompt of token ids counts one token per id
// (text estimates leave it empty), single and batched, on both decoders.
func TestPromptIDsCounted(t *testing.T) {
	for body, want := range map[string]int{
		`{"model":"m","prompt":[1,2,3]}`:              3,
		`{"model":"m","prompt":[[1,2],[3,4,5]]}`:      5,
		`{"model":"m","prompt":"once upon a time"}`:   0,
		`{"model":"m","prompt":["a","b"]}`:            0,
		`{"model":"m","messages":[],"prompt":null}`:   0,
		`{"model":"m","prompt":[1,2,3],"x":"\u00e9"}`: 3,
	} {
		var q request
		if err := decodeRequest([]byte(body), &q); err != nil {
			t.Fatal(err)
		}
		if got := q.promptIDs(); got != want {
			t.Errorf("%s: %d ids, want %d", body, got, want)
		}
	}
}

// TestDecodeExactNames: members are matched by their exact names, as the
// backends match them; a name in another case is another member.
func TestDecodeExactNames(t *testing.T) {
	for body, want := range map[string]request{
		`{"model":"a","MODEL":"b"}`:                  {Model: "a"},
		`{"MODEL":"b","Stream":true,"model":"a"}`:    {Model: "a"},
		`{"Model":"b"}`:                              {},
		`{"model":"a","model":"c","stream":true}`:    {Model: "c", Stream: true},
		`{"model":"a","Prompt":"x","NVEXT":{"a":1}}`: {Model: "a"},
	} {
		var q request
		if err := decodeRequest([]byte(body), &q); err != nil || !reflect.DeepEqual(q, want) {
			t.Errorf("%s: %+v %v, want %+v", body, q, err, want)
		}
	}
}

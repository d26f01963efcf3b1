package jsonscan_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/continuum-router/continuum/internal/jsonscan"
)

// FuzzMembers: on any JSON object Members returns its members in order,
// keys and values where encoding/json reads them, and Get takes the value
// encoding/json keeps; on any bytes at all the offsets stay within the
// text, in order, and nothing panics.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{
		`{}`, ` { "a" : 1 , "b":[1,{"c":"}"}],"\u0061\"":null } `, `{"a":"x\\"}`, `[1]`, `"s"`, `{"a":}`, `{"a":1,}`,
		`{"role":"user","content":[{"type":"text","text":"t"}],"name":true}`, `{"a":-1.5e3,"b":false}`, `{"a`, `{"a":[`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		start := jsonscan.SkipSpace(b, 0)
		if start >= len(b) || b[start] != '{' {
			return
		}
		ms, end := jsonscan.Members(b, start)
		if end < start || end > len(b) {
			t.Fatalf("%q: end %d outside the text", b, end)
		}
		prev := start
		for _, m := range ms {
			if m.Key < prev || m.KeyEnd < m.Key || m.Val < m.KeyEnd || m.ValEnd < m.Val || m.ValEnd > len(b) {
				t.Fatalf("%q: member %+v out of order or outside the text", b, m)
			}
			prev = m.ValEnd
			m.KeyIs(b, "a")
		}
		var want map[string]json.RawMessage
		if !json.Valid(b) || json.Unmarshal(b, &want) != nil {
			return
		}
		if jsonscan.SkipSpace(b, end) != len(b) {
			t.Fatalf("%q: the object ends at %d", b, end)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		if _, err := dec.Token(); err != nil {
			t.Fatal(err)
		}
		n := 0
		for ; dec.More(); n++ {
			i := n
			k, err := dec.Token()
			if err != nil {
				t.Fatal(err)
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
			key := k.(string)
			if i >= len(ms) || !ms[i].KeyIs(b, key) || !bytes.Equal(ms[i].Value(b), v) {
				t.Fatalf("%q: member %d is %+v, want %q: %s", b, i, ms, key, v)
			}
			if s, ok := jsonscan.String(b[ms[i].Key:ms[i].KeyEnd]); !ok || s != key {
				t.Fatalf("%q: key %d decodes to %q, want %q", b, i, s, key)
			}
			if got, _ := jsonscan.Get(b, ms, key); !bytes.Equal(got, want[key]) {
				t.Fatalf("%q: Get(%q) = %s, encoding/json keeps %s", b, key, got, want[key])
			}
		}
		if n != len(ms) {
			t.Fatalf("%q: %d members, encoding/json reads %d", b, len(ms), n)
		}
	})
}

// FuzzItems: on any JSON list Items returns its values as encoding/json
// reads them; on any bytes at all the values stay within the text and
// nothing panics.
func FuzzItems(f *testing.F) {
	for _, s := range []string{`[]`, ` [ 1 , "a,]" , {"b":[2]} , null ] `, `[1,`, `[`, `[[],[[]]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		start := jsonscan.SkipSpace(b, 0)
		if start >= len(b) || b[start] != '[' {
			return
		}
		items, end := jsonscan.Items(b, start)
		if end < start || end > len(b) {
			t.Fatalf("%q: end %d outside the text", b, end)
		}
		var want []json.RawMessage
		if !json.Valid(b) || json.Unmarshal(b, &want) != nil {
			return
		}
		if len(items) != len(want) {
			t.Fatalf("%q: %d items, encoding/json reads %d", b, len(items), len(want))
		}
		for i := range want {
			if !bytes.Equal(items[i], want[i]) {
				t.Fatalf("%q: item %d is %s, want %s", b, i, items[i], want[i])
			}
		}
	})
}

func TestSkipValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int
	}{
		{`"a\"b",`, 6}, {`{"a":[1,"]"]} x`, 13}, {`-1.5e3}`, 6}, {`true `, 4}, {`null`, 4}, {`[`, 1}, {``, 0},
	} {
		if got := jsonscan.SkipValue([]byte(tc.in), 0); got != tc.want {
			t.Errorf("SkipValue(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		{`"a"`, "a", true}, {`"\u00e9\n"`, "é\n", true}, {"\"\xff\"", "\ufffd", true},
		{`null`, "", false}, {`1`, "", false}, {`{}`, "", false}, {``, "", false}, {`"a`, "", false},
	} {
		if got, ok := jsonscan.String([]byte(tc.in)); got != tc.want || ok != tc.ok {
			t.Errorf("String(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

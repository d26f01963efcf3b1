package shim_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/shim"
)

// The error bodies a dynamo.frontend (or a proxy in front of it) answers
// come off the network: Repin, FailedWorkers, IsPrefillRefusal and
// ErrorMessage read them to decide whether a request is pinned again and
// which worker is blamed. Their fuzz targets hold each to its documented
// contract on any bytes, mostly by comparing with simpler reference
// readings written here.

// refusalText is the direct-mode frontend's refusal for want of a prefill
// id, as the shim's documentation quotes it.
const refusalText = "Prefill worker ID required in Direct routing mode"

// scanBytes is how much of a body the shim reads for its cause (4 KiB).
const scanBytes = 4 << 10

// errorBodySeeds are answers of a frontend and of the proxies in front of
// one, as the package's unit tests spell them.
var errorBodySeeds = []string{
	`{"error":{"message":"instance_id=7465 not found for endpoint dynamo/decode/generate"}}`,
	`Worker instance 12 Not Found`,
	`{"error":"Cannot connect to the engine: Connection refused (os error 111)"}`,
	`stream disconnected: no responders`,
	`{"error":"EngineShutdown"}`,
	`Failed to generate completions`,
	`upstream connect error or disconnect/reset before headers. reset reason: connection failure, transport failure reason: delayed connect error: 111 Connection refused`,
	`no healthy upstream`,
	``,
	`{"error":{"message":"Prefill worker ID required in Direct routing mode but none found"}}`,
	`{"error":"Failed to generate completions: Prefill worker ID required in Direct routing mode but none found"}`,
	`{"message":"Failed to generate completions: Prefill worker ID required in Direct routing mode but none found.","type":"Service Unavailable","code":503}`,
	`{"message":" Prefill worker ID required in Direct routing mode but none found.","code":500}`,
	`{"error":"Model not found: m"}`,
	`{"detail":"Not Found"}`,
	`{"error":null,"message":"","detail":"x"}`,
	`{"ERROR":{"Message":"case"},"error":"later"}`,
	`{"message":5}`,
	"{\"error\":\"\xff\xfe\"}",
	`{"error":"\ud800 lone surrogate"}`,
	`null`, `[]`, `"str"`,
}

// repinReasons is the closed set Repin answers from ("" included).
var repinReasons = []string{"", shim.RepinInstanceNotFound, shim.RepinEngineUnreachable, shim.RepinStatus5xx}

// unreachablePhrases are the words of a frontend that could not reach a
// pinned engine, as Repin's documentation lists them (lower case).
var unreachablePhrases = []string{
	"connection refused", "cannot connect", "can't connect", "cannotconnect", "no responders", "disconnected",
	"connection reset", "connection timeout", "connectiontimeout", "engine shutdown", "engineshutdown", "shutting down",
}

// refRepin is Repin as its documentation states it: "" for any status
// outside 5xx and for an answer carrying the prefill refusal; else, on
// the body's first 4 KiB read without case, a proxy's own failure is
// status_5xx, an instance not found is instance_not_found, an engine the
// frontend could not reach is engine_unreachable, and anything else is
// status_5xx. strings.ToLower folds as the shim does (Unicode), so that
// the two agree on bodies that are not ASCII.
func refRepin(status int, body []byte) string {
	if status < 500 || status > 599 || bytes.Contains(body, []byte(refusalText)) {
		return ""
	}
	s := strings.ToLower(string(body[:min(len(body), scanBytes)]))
	switch {
	case strings.Contains(s, "upstream connect error"), strings.Contains(s, "no healthy upstream"):
		return shim.RepinStatus5xx
	case strings.Contains(s, "instance") && strings.Contains(s, "not found"):
		return shim.RepinInstanceNotFound
	}
	for _, p := range unreachablePhrases {
		if strings.Contains(s, p) {
			return shim.RepinEngineUnreachable
		}
	}
	return shim.RepinStatus5xx
}

// refFields reads raw the way encoding/json fills a struct from it, for
// the reference of ErrorMessage: the values of the keys that match key
// without case (json's rule), in order. null is a top-level value that
// fills nothing; ok is false when raw is not JSON or not an object.
func refFields(raw []byte, keys ...string) (vals map[string][]json.RawMessage, ok bool) {
	if !json.Valid(raw) {
		return nil, false
	}
	t := bytes.TrimSpace(raw)
	if bytes.Equal(t, []byte("null")) {
		return map[string][]json.RawMessage{}, true
	}
	if t[0] != '{' {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	if _, err := dec.Token(); err != nil {
		return nil, false
	}
	vals = map[string][]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		for _, k := range keys {
			if strings.EqualFold(tok.(string), k) {
				vals[k] = append(vals[k], v)
			}
		}
	}
	return vals, true
}

// refString is what a string field holds after its matching values are
// stored in turn: the last string (null leaves the field as it was), or
// !ok when one of them is not a string (a type error fails the decode).
func refString(vals []json.RawMessage) (s string, ok bool) {
	for _, v := range vals {
		switch v[0] {
		case 'n':
		case '"':
			if err := json.Unmarshal(v, &s); err != nil {
				return "", false
			}
		default:
			return "", false
		}
	}
	return s, true
}

// refErrorMessage is ErrorMessage's documented precedence, read with a
// token decoder rather than a struct: the first non-empty of
// error.message, error (a string), message and detail; "" when the body
// is not a JSON object (or null) or a field has the wrong type.
func refErrorMessage(body []byte) string {
	top, ok := refFields(body, "error", "message", "detail")
	if !ok {
		return ""
	}
	message, ok1 := refString(top["message"])
	detail, ok2 := refString(top["detail"])
	if !ok1 || !ok2 {
		return ""
	}
	if n := len(top["error"]); n > 0 {
		errRaw := top["error"][n-1] // a RawMessage field keeps the last value, null included
		if inner, ok := refFields(errRaw, "message"); ok && bytes.TrimSpace(errRaw)[0] == '{' {
			if m, ok := refString(inner["message"]); ok && m != "" {
				return m
			}
		} else if ok { // error is null: no message in it
		} else if errRaw[0] == '"' {
			var s string
			if json.Unmarshal(errRaw, &s) == nil && s != "" {
				return s
			}
		}
	}
	if message != "" {
		return message
	}
	return detail
}

// FuzzErrorBody: on any status and body, Repin answers from its closed set
// and as its documented reading does (and only the first 4 KiB and the
// status class decide it); IsPrefillRefusal is an error answer carrying
// the refusal, and a 500 only when the refusal is its message, never one
// Repin would pin again; ErrorMessage is valid UTF-8, bounded by the body
// (at most three bytes per body byte: an invalid byte becomes U+FFFD), ""
// unless the body is JSON, and agrees with a token-level reading of its
// documented precedence.
func FuzzErrorBody(f *testing.F) {
	for _, s := range errorBodySeeds {
		for _, status := range []int{500, 503, 400, 200} {
			f.Add(status, []byte(s))
		}
	}
	f.Add(502, append(bytes.Repeat([]byte("x"), scanBytes-4), []byte("instance not found")...))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		got := shim.Repin(status, body)
		if !slices.Contains(repinReasons, got) {
			t.Fatalf("Repin(%d, %q) = %q, not a re-pin reason", status, body, got)
		}
		if want := refRepin(status, body); got != want {
			t.Fatalf("Repin(%d, %q) = %q, want %q", status, body, got, want)
		}
		if got != "" {
			// Any 5xx reads the same body the same way.
			if other := shim.Repin(500+(status+1)%100, body); other != got {
				t.Fatalf("Repin(%q) = %q at %d, %q at another 5xx", body, got, status, other)
			}
			if len(body) > scanBytes {
				if head := shim.Repin(status, body[:scanBytes]); head != got {
					t.Fatalf("Repin read past its first 4 KiB: %q whole, %q on the head", got, head)
				}
			}
		}
		if shim.WorkerFault(got) != (got == shim.RepinInstanceNotFound || got == shim.RepinEngineUnreachable) {
			t.Fatalf("WorkerFault(%q) disagrees with its reasons", got)
		}

		mentions := bytes.Contains(body, []byte(refusalText))
		if shim.MentionsPrefillRefusal(body) != mentions {
			t.Fatalf("MentionsPrefillRefusal(%q) = %v", body, !mentions)
		}
		refused := shim.IsPrefillRefusal(status, body)
		msg := shim.ErrorMessage(body)
		wantRefused := status >= 400 && mentions
		if wantRefused && status == 500 {
			text := msg
			if text == "" {
				text = string(body)
			}
			wantRefused = strings.HasPrefix(strings.TrimSpace(text), refusalText)
		}
		if refused != wantRefused {
			t.Fatalf("IsPrefillRefusal(%d, %q) = %v, want %v", status, body, refused, wantRefused)
		}
		if refused && got != "" {
			t.Fatalf("a refusal of the pins (%d, %q) is pinned again as %q", status, body, got)
		}

		if !utf8.ValidString(msg) {
			t.Fatalf("ErrorMessage(%q) = %q, not UTF-8", body, msg)
		}
		if len(msg) > 3*len(body) {
			t.Fatalf("ErrorMessage(%q) = %d bytes from %d", body, len(msg), len(body))
		}
		if msg != "" && !json.Valid(body) {
			t.Fatalf("ErrorMessage(%q) = %q from a body that is not JSON", body, msg)
		}
		if want := refErrorMessage(body); msg != want {
			t.Fatalf("ErrorMessage(%q) = %q, want %q", body, msg, want)
		}
	})
}

// FuzzErrorMessageShapes: a body built in one of the shapes ErrorMessage
// documents carries the message its precedence names (error.message, then
// error as a string, then message, then detail, the first non-empty).
func FuzzErrorMessageShapes(f *testing.F) {
	f.Add("instance_id=7465 not found", "", "", "", uint8(0))
	f.Add("", "Cannot connect to the engine", "", "", uint8(1))
	f.Add("", "", "Failed to generate completions", "Not Found", uint8(2))
	f.Add("", "", "", "Not Found", uint8(2))
	f.Add("a\u00e9\u4e16", "b", "c", "d", uint8(3))
	f.Fuzz(func(t *testing.T, inner, errStr, message, detail string, shape uint8) {
		for _, s := range []string{inner, errStr, message, detail} {
			if !utf8.ValidString(s) {
				return // json.Marshal would change it; the arbitrary-bytes target covers those
			}
		}
		body := map[string]any{}
		if message != "" || shape&4 != 0 {
			body["message"] = message
		}
		if detail != "" || shape&8 != 0 {
			body["detail"] = detail
		}
		want := ""
		switch shape % 3 {
		case 0: // {"error":{"message":...}}
			body["error"] = map[string]any{"message": inner, "type": "Internal Server Error", "code": 500}
			want = inner
		case 1: // {"error":"..."}
			body["error"] = errStr
			want = errStr
		}
		for _, s := range []string{message, detail} {
			if want == "" {
				want = s
			}
		}
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		if got := shim.ErrorMessage(b); got != want {
			t.Fatalf("ErrorMessage(%s) = %q, want %q", b, got, want)
		}
	})
}

// pinWorker is a worker of namespace ns with instance id id.
func pinWorker(ns string, id uint64, role fleet.Role) *fleet.Worker {
	return &fleet.Worker{ID: fleet.WorkerID{Namespace: ns, InstanceID: id}, Role: role, Model: "m"}
}

// FuzzFailedWorkers: the workers blamed for a failed pinned dispatch are
// only the pin's own, each once, the decode worker first; an aggregated
// pin blames its one worker, named. A pair blames one worker (named) only
// when the body names that worker's id as a whole decimal number and not
// the other's, else both (not named). "Whole" is judged on the body as
// sent: a number the 4 KiB scan cuts short is not the id it was cut to.
func FuzzFailedWorkers(f *testing.F) {
	for _, s := range []string{
		"instance_id=7465 not found", "instance_id=746 not found", "instance_id=74650 not found",
		"Failed to generate completions", "instances 7465 and 746 are both broken", "",
		`{"error":{"message":"instance_id=07465 not found"}}`,
	} {
		f.Add([]byte(s), uint64(7465), uint64(746), uint8(1))
	}
	f.Add([]byte("worker 42 is gone"), uint64(42), uint64(42), uint8(2))
	f.Add([]byte("worker 42 is gone"), uint64(42), uint64(0), uint8(0))
	f.Add([]byte("id 18446744073709551615."), uint64(18446744073709551615), uint64(1), uint8(1))
	f.Fuzz(func(t *testing.T, body []byte, decodeID, prefillID uint64, mode uint8) {
		d := pinWorker("dynamo", decodeID, fleet.RoleDecode)
		pin := pick.Pin{Namespace: "dynamo", Decode: pick.Target{Worker: d}}
		all := []fleet.WorkerID{d.ID}
		switch mode % 3 {
		case 1:
			pin.Prefill = &pick.Target{Worker: pinWorker("dynamo", prefillID, fleet.RolePrefill)}
		case 2: // the same instance id in another namespace is another worker
			pin.Prefill = &pick.Target{Worker: pinWorker("canary", prefillID, fleet.RolePrefill)}
		}
		if pin.Prefill != nil && pin.Prefill.Worker.ID != d.ID {
			all = append(all, pin.Prefill.Worker.ID)
		}
		ids, named := shim.FailedWorkers(pin, body)
		if len(ids) == 0 || ids[0] != d.ID && !named {
			t.Fatalf("blamed %v (named %v): the decode worker comes first", ids, named)
		}
		for i, id := range ids {
			if !slices.Contains(all, id) || slices.Index(ids, id) != i {
				t.Fatalf("blamed %v, outside the pin's workers %v or twice", ids, all)
			}
		}
		if named != (len(ids) == 1) {
			t.Fatalf("blamed %v with named %v", ids, named)
		}
		if len(all) == 1 {
			if !named || ids[0] != d.ID {
				t.Fatalf("aggregated pin: blamed %v (named %v)", ids, named)
			}
			return
		}
		// The numbers the scanned head names, each judged whole on the
		// full body: the run a digit run starting in the head spans.
		head := len(body)
		if head > scanBytes {
			head = scanBytes
		}
		inHead := map[string]bool{}
		// Collect the digit runs that start within the head.
		for i := 0; i < head; {
			if body[i] < '0' || body[i] > '9' {
				i++
				continue
			}
			j := i
			for j < len(body) && body[j] >= '0' && body[j] <= '9' {
				j++
			}
			inHead[string(body[i:j])] = true
			i = j
		}
		var hits []fleet.WorkerID
		for _, id := range all {
			if inHead[strconv.FormatUint(id.InstanceID, 10)] {
				hits = append(hits, id)
			}
		}
		want, wantNamed := all, false
		if len(hits) == 1 {
			want, wantNamed = hits, true
		}
		if !slices.Equal(ids, want) || named != wantNamed {
			t.Fatalf("FailedWorkers(%v, %d bytes ending %q) = %v (named %v), want %v (named %v)",
				all, len(body), body[max(0, len(body)-64):], ids, named, want, wantNamed)
		}
	})
}

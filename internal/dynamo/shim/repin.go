package shim

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// Re-pin reasons, the label of continuum_dynamo_repin_total{reason}. The
// set is closed.
const (
	// RepinInstanceNotFound: the frontend does not know a pinned instance
	// (it left the fleet before the router's view caught up).
	RepinInstanceNotFound = "instance_not_found"
	// RepinEngineUnreachable: the frontend could not reach a pinned
	// worker's engine (connection refused, no responders, disconnected,
	// shutting down).
	RepinEngineUnreachable = "engine_unreachable"
	// RepinStatus5xx: any other 5xx answer before a response started.
	RepinStatus5xx = "status_5xx"
)

// WorkerFault reports whether a re-pin reason says the frontend answered
// for a pinned worker that is gone or unreachable (not for itself): the
// frontend replica is up.
func WorkerFault(reason string) bool {
	return reason == RepinInstanceNotFound || reason == RepinEngineUnreachable
}

// RepinReasons lists the re-pin reasons.
var RepinReasons = []string{RepinInstanceNotFound, RepinEngineUnreachable, RepinStatus5xx}

// repinScan bounds how much of an answer is read for its cause: error
// bodies are short, and the cause comes first.
const repinScan = 4 << 10

// unreachable are the phrases (lower case) of a frontend that could not
// reach the pinned engine: Dynamo's migratable failures (cannot connect,
// disconnected, connection timeout, engine shutdown) as they read in an
// error body, and the transport's own words for them.
var unreachable = [][]byte{
	[]byte("connection refused"), []byte("cannot connect"), []byte("can't connect"), []byte("cannotconnect"),
	[]byte("no responders"), []byte("disconnected"), []byte("connection reset"), []byte("connection timeout"),
	[]byte("connectiontimeout"), []byte("engine shutdown"), []byte("engineshutdown"), []byte("shutting down"),
}

// ProxyUnreachable reports whether a 5xx answer is a proxy's in front of
// the frontend (a service mesh's sidecar) saying it could not reach the
// frontend at all: it found no healthy endpoint, or its connection to it
// failed (as opposed to a connection that ended after the request went
// out, which Envoy words "connection termination" or "reset"). The
// request never reached the frontend: a failure to reach the replica,
// retried on another with the same pins.
func ProxyUnreachable(status int, body []byte) bool {
	if status < 500 || status > 599 {
		return false
	}
	b := bytes.ToLower(body[:min(len(body), repinScan)])
	return bytes.Contains(b, []byte("no healthy upstream")) ||
		bytes.Contains(b, []byte("upstream connect error")) && bytes.Contains(b, []byte("connection failure"))
}

// FrontendUp reports whether a 5xx answer is a Dynamo frontend's own word
// about its workers or its load, which says the frontend is up: such
// answers do not count against the replica's breaker. They are the generic
// errors newer frontends answer in place of the failure's words (which
// they log): 500 "Failed to generate completions" for a dispatch that
// failed, 503 "Service temporarily unavailable" when no worker could take
// it; 503 "Model `m` is not ready to serve requests yet" while the
// frontend's view lacks a role of the model's workers; and the frontend
// shedding load, 529 (its default overload status) or 503 "Service
// temporarily overloaded". Which worker failed, or whether the frontend
// wanted a prefill id the router's view lacks, they do not say.
func FrontendUp(status int, body []byte) bool {
	if status == statusOverloaded {
		return true
	}
	msg := ErrorMessage(body)
	switch {
	case msg == "Failed to generate completions":
		return status == http.StatusInternalServerError
	case msg == "Service temporarily unavailable", msg == "Service temporarily overloaded":
		return status == http.StatusServiceUnavailable
	case strings.HasPrefix(msg, "Model `") && strings.Contains(msg, "` is not ready to serve requests yet"):
		return status == http.StatusServiceUnavailable
	}
	return false
}

// statusOverloaded is the status a Dynamo frontend sheds load with unless
// configured otherwise.
const statusOverloaded = 529

// Repin says why a frontend's answer to a pinned dispatch calls for
// pinning the request to other workers, or "" when it does not. Only a
// 5xx answer does (any answer but one that refuses the pins themselves or
// quotes that refusal, MentionsPrefillRefusal): before a response starts, a 5xx says the dispatch
// went nowhere, most often because a pinned worker is gone. A 4xx is about
// the request, and a failure to reach the frontend itself is retried on
// another replica with the same pins.
func Repin(status int, body []byte) string {
	// The frontend asking for a prefill id, even quoted in a generic 500,
	// says the router's view lacks a prefill worker: picking again from
	// the same view pins the same way.
	if status < 500 || status > 599 || MentionsPrefillRefusal(body) {
		return ""
	}
	b := bytes.ToLower(body[:min(len(body), repinScan)])
	switch {
	case bytes.Contains(b, []byte("upstream connect error")) || bytes.Contains(b, []byte("no healthy upstream")):
		// A proxy in front of the frontend (a service mesh's sidecar)
		// could not reach the frontend itself: its words ("connection
		// refused") are about the replica, which is then not up.
		return RepinStatus5xx
	case bytes.Contains(b, []byte("not found")) && bytes.Contains(b, []byte("instance")):
		return RepinInstanceNotFound
	}
	for _, p := range unreachable {
		if bytes.Contains(b, p) {
			return RepinEngineUnreachable
		}
	}
	return RepinStatus5xx
}

// FailedWorkers are the workers a failed pinned dispatch may be blamed on,
// and whether the answer named it: the one pinned worker the answer names
// by its decimal instance id (named), else every pinned worker, the decode
// worker first (an answer that names none does not say which of a pair
// failed). An aggregated pin has one worker, named by construction.
func FailedWorkers(pin pick.Pin, body []byte) (ids []fleet.WorkerID, named bool) {
	all := []fleet.WorkerID{pin.Decode.Worker.ID}
	if pin.Prefill != nil && pin.Prefill.Worker.ID != pin.Decode.Worker.ID {
		all = append(all, pin.Prefill.Worker.ID)
	}
	if len(all) == 1 {
		return all, true
	}
	b := body[:min(len(body), repinScan)]
	if len(b) < len(body) && isDigit(body[len(b)]) {
		// A number the cut runs through is not read: its head alone
		// could be another worker's id.
		for len(b) > 0 && isDigit(b[len(b)-1]) {
			b = b[:len(b)-1]
		}
	}
	var hits []fleet.WorkerID
	for _, id := range all {
		if containsNumber(b, strconv.AppendUint(nil, id.InstanceID, 10)) {
			hits = append(hits, id)
		}
	}
	if len(hits) == 1 {
		return hits, true
	}
	return all, false
}

// containsNumber reports whether b holds num as a whole decimal number
// (not part of a longer one).
func containsNumber(b, num []byte) bool {
	for i := 0; ; {
		j := bytes.Index(b[i:], num)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(num)
		if (start == 0 || !isDigit(b[start-1])) && (end == len(b) || !isDigit(b[end])) {
			return true
		}
		i = start + 1
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// RepinLimit is how many times a request pinned by pin may be pinned to
// other workers after a failure: the migration_limit of its decode worker's
// card. That is Dynamo's meaning of the field: how many times a request may
// be moved to another worker after losing its own (the first attempt not
// counted); 0, Dynamo's default, moves it never.
func RepinLimit(pin pick.Pin) int { return int(pin.Decode.Worker.MigrationLimit) }

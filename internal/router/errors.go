package router

import (
	"encoding/json"
	"net/http"
)

// Error codes the router answers with (OpenAI-shaped bodies).
const (
	CodeBadRequest                = "invalid_request_error"
	CodeUnauthorized              = "invalid_api_key"
	CodeForbidden                 = "model_not_allowed"
	CodeRateLimited               = "rate_limit_exceeded"
	CodeNoBackend                 = "no_backend_available"
	CodeUpstream                  = "upstream_error"
	CodeTimeout                   = "upstream_timeout"
	CodePrefillDecodeUnavailable  = "disaggregated_prefill_decode_unavailable"
	CodeDisaggregatedDecodeFailed = "disaggregated_decode_failed"
	CodeNotFound                  = "not_found"
	// CodeMethodNotAllowed: a route the router has, asked with a method
	// it does not take (405 with Allow).
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeOverloaded: the router serves server.max_in_flight requests
	// already (503 with Retry-After).
	CodeOverloaded = "router_overloaded"
	// CodeModelNotFound: no backend lists the model and no discovered
	// Dynamo worker serves it (404, as OpenAI answers an unknown model).
	CodeModelNotFound = "model_not_found"
	// CodeAllWorkersBusy: a busy threshold is set and every worker that
	// could serve the request is busy (503 with Retry-After).
	CodeAllWorkersBusy = "all_workers_busy"
	// CodeNotImplemented: an endpoint this router cannot serve as
	// configured (count_tokens without loaded artifacts, compaction
	// without a native Responses backend).
	CodeNotImplemented = "not_implemented"
)

type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// writeError writes {"error": {...}} with status and a null param.
func writeError(w http.ResponseWriter, status int, code, message string) {
	writeParamError(w, status, code, "", message)
}

// writeParamError is writeError naming the request parameter at fault
// (null when param is "").
func writeParamError(w http.ResponseWriter, status int, code, param, message string) {
	typ := "invalid_request_error"
	switch {
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case status == http.StatusUnauthorized:
		typ = "authentication_error"
	case status >= 500:
		typ = "server_error"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	e := apiError{Message: message, Type: typ, Code: code}
	if param != "" {
		e.Param = &param
	}
	_ = json.NewEncoder(w).Encode(map[string]apiError{"error": e})
}

package admin_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// TestWorkerViewHidesBootstrapAddress: a card's disaggregated_endpoint is
// shown in its string form (an endpoint path); the object form carries the
// engine's bootstrap host and port, a pod address the view never exposes.
func TestWorkerViewHidesBootstrapAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ card, want string }{
		{`"dynamo/prefill/generate"`, `"dynamo/prefill/generate"`},
		{`{"bootstrap_host":"10.9.8.7","bootstrap_port":8998}`, `null`},
		{``, `null`},
	} {
		w := &fleet.Worker{DisaggregatedEndpoint: json.RawMessage(tc.card)}
		out, err := json.Marshal(admin.WorkerView(w))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), `"disaggregated_endpoint":`+tc.want) || strings.Contains(string(out), "10.9.8.7") {
			t.Errorf("card %s: view %s", tc.card, out)
		}
	}
}

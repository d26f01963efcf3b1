package kvinspect_test

import (
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/cli/kvinspect"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// TestReadRequestAsTheRouter: match reads the request as the router does,
// so the picker gets the router's model and token estimate: the model of
// an exact "model" member only, and an estimate that counts a prompt's
// token ids and every text of a batch or a content list.
func TestReadRequestAsTheRouter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, path, body string
		model            string
		estimate         int
		err              string
	}{
		{name: "chat", path: kvinspect.PathChat, body: `{"model":"m","messages":[{"role":"user","content":"hello there, router"}]}`,
			model: "m", estimate: pick.EstimateTokens("hello there, router")},
		{name: "content parts", path: kvinspect.PathChat, body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"one two"},{"type":"text","text":"three"}]}]}`,
			model: "m", estimate: pick.EstimateTokens("one two\nthree")},
		{name: "token ids", path: kvinspect.PathCompletions, body: `{"model":"m","prompt":[1,2,3,4,5,6,7,8,9]}`,
			model: "m", estimate: 9},
		{name: "batch of ids", path: kvinspect.PathCompletions, body: `{"model":"m","prompt":[[1,2],[3,4,5]]}`,
			model: "m", estimate: 5},
		{name: "batch of texts", path: kvinspect.PathCompletions, body: `{"model":"m","prompt":["a b c d e f","g h i j k l"]}`,
			model: "m", estimate: pick.EstimateTokens("a b c d e f\ng h i j k l")},
		{name: "model in capitals", path: kvinspect.PathChat, body: `{"MODEL":"m","messages":[]}`, err: `no "model"`},
		{name: "not an object", path: kvinspect.PathChat, body: `[1]`, err: "not a JSON object"},
		{name: "no prompt", path: kvinspect.PathCompletions, body: `{"model":"m"}`, err: `no "prompt"`},
		{name: "no messages", path: kvinspect.PathChat, body: `{"model":"m","messages":null}`, err: `no "messages"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, q, err := kvinspect.ReadRequest(strings.NewReader(tc.body), tc.path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil || q.Model != tc.model || q.PromptTokenEstimate != tc.estimate {
				t.Fatalf("model %q, estimate %d, %v; want %q, %d", q.Model, q.PromptTokenEstimate, err, tc.model, tc.estimate)
			}
		})
	}
}

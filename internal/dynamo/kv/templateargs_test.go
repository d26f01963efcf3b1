package kv_test

import (
	"context"
	"slices"
	"testing"

	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
)

// TestChatTemplateArgsName: Dynamo's frontend reads the template
// kwargs from the request member chat_template_args (its field's name),
// chat_template_kwargs being only a serde alias of it; a client that sends
// chat_template_args gets its kwargs rendered by the frontend, so the
// router must render them too (gpt-oss's reasoning_effort, Qwen3's
// enable_thinking, DeepSeek's thinking change the prompt's tokens).
func TestChatTemplateArgsName(t *testing.T) {
	t.Parallel()
	base := qwen3(t)
	tmpl, err := chattemplate.Compile(`{{ enable_thinking }}|{{ reasoning_effort }}`, chattemplate.WithDynamoFrontend())
	if err != nil {
		t.Fatal(err)
	}
	p := &kv.Preparer{Tokenizer: base.Tokenizer, Template: tmpl}
	user := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct{ body, want string }{
		{`{` + user + `,"chat_template_kwargs":{"enable_thinking":false,"reasoning_effort":"high"}}`, "false|high"},
		{`{` + user + `,"chat_template_args":{"enable_thinking":false,"reasoning_effort":"high"}}`, "false|high"},
	} {
		got, _, err := p.ChatRequest(context.Background(), []byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		want, err := p.Text(tc.want, false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: rendered ids %v, want the ids of %q", tc.body, got, tc.want)
		}
	}
	// Both names in one request: the frontend's decoder refuses it (one
	// member given twice), so the router does not render it either.
	both := `{` + user + `,"chat_template_args":{"enable_thinking":false},"chat_template_kwargs":{"enable_thinking":true}}`
	if _, _, err := p.ChatRequest(context.Background(), []byte(both)); err == nil {
		t.Errorf("%s: rendered", both)
	}
}

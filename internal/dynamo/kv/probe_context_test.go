package kv_test

import (
	"testing"

	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
)

// TestContentArraysProbeContext: Dynamo's frontend decides
// requires_content_arrays (formatters.rs detect_content_array_usage) by
// rendering a context of messages and add_generation_prompt alone: no
// bos_token, eos_token, unk_token or tools. A template that concatenates
// bos_token fails both probes there (undefined + string is an error in
// minijinja), so the frontend does not give contents as lists; the router's
// probe renders with the config's tokens and decides that it does.
func TestContentArraysProbeContext(t *testing.T) {
	t.Parallel()
	config := []byte(`{"bos_token": "<s>", "chat_template": "{{ bos_token + '' }}{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}"}`)
	tmpl, err := chattemplate.FromTokenizerConfig(config, "", kv.TemplateOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	if kv.RequiresContentArrays(tmpl) {
		t.Error("requires content arrays: true, but the frontend's probe (no bos_token in its context) fails both renders and decides false")
	}
}

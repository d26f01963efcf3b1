package kv_test

import (
	"context"
	"slices"
	"testing"

	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
)

// The router's Dynamo-mode prompt against the text Dynamo's frontend
// renders for the same request: each test gives a request and that text,
// and checks the router's token ids against the ids of the text.

// shapePreparer is a Preparer with Qwen3's tokenizer and src compiled as
// the router compiles a model's template, its content arrays probed as
// kv.Build probes them.
func shapePreparer(t *testing.T, src string) *kv.Preparer {
	t.Helper()
	base := qwen3(t)
	tmpl, err := chattemplate.Compile(src, kv.TemplateOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	return &kv.Preparer{Tokenizer: base.Tokenizer, Template: tmpl, ContentArrays: kv.RequiresContentArrays(tmpl), Media: kv.MediaPlaceholder(tmpl)}
}

// expectRender checks that the router's ids for body are the ids of want.
func expectRender(t *testing.T, p *kv.Preparer, body, want string) {
	t.Helper()
	got, _, err := p.ChatRequest(context.Background(), []byte(body))
	if err != nil {
		t.Errorf("router could not render a request the frontend renders as %q: %v", want, err)
		return
	}
	w, err := p.Text(want, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, w) {
		t.Errorf("router ids %v\nwant the ids %v of the frontend's render %q", got, w, want)
	}
}

// TestReasoningContentInjectedAsThink: for a template that does not read
// reasoning_content, an assistant message's reasoning goes before its
// content as <think>…</think> (the content when there is none; a text
// part first in a list of parts; each non-empty segment of a list), and
// the field goes; a template that reads it gets it as sent.
func TestReasoningContentInjectedAsThink(t *testing.T) {
	t.Parallel()
	p := shapePreparer(t, `{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ m.reasoning_content }}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}`)
	if !p.Template.Mentions("reasoning_content") {
		t.Fatal("the template reads reasoning_content")
	}
	expectRender(t, p,
		`{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a","reasoning_content":"r"},{"role":"user","content":"q2"}]}`,
		`<user>q<assistant>ar<user>q2<a>`)

	p = shapePreparer(t, `{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}`)
	for _, c := range []struct{ name, body, want string }{
		{"text", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a","reasoning_content":"r"},{"role":"user","content":"q2"}]}`,
			`<user>q<assistant><think>r</think>a<user>q2<a>`},
		{"null content", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"reasoning_content":"r"},{"role":"user","content":"q2"}]}`,
			`<user>q<assistant><think>r</think><user>q2<a>`},
		{"no content", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","reasoning_content":"r"},{"role":"user","content":"q2"}]}`,
			`<user>q<assistant><think>r</think><user>q2<a>`},
		{"empty reasoning", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a","reasoning_content":""},{"role":"user","content":"q2"}]}`,
			`<user>q<assistant>a<user>q2<a>`},
		{"segments", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a","reasoning_content":["r1","","r2"]},{"role":"user","content":"q2"}]}`,
			`<user>q<assistant><think>r1</think><think>r2</think>a<user>q2<a>`},
	} {
		t.Run(c.name, func(t *testing.T) { expectRender(t, p, c.body, c.want) })
	}

	parts := shapePreparer(t, `{% for m in messages %}<{{ m.role }}>{% if m.content is string %}{{ m.content }}{% else %}{% for c in m.content %}[{{ c.text }}]{% endfor %}{% endif %}{% endfor %}`)
	expectRender(t, parts,
		`{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"http://x/i.png"}}],"reasoning_content":"r"},{"role":"user","content":"q2"}]}`,
		`<user>q<assistant>[<think>r</think>][a][]<user>q2`)
}

// TestMediaPartsArePlaceholders: image, video and audio parts reach the
// template as placeholders of their kind, without their URLs.
func TestMediaPartsArePlaceholders(t *testing.T) {
	t.Parallel()
	p := shapePreparer(t, `{% for p in messages[0].content %}{{ p.type }}{% if p.video_url or p.audio_url or p.image_url %}(url){% endif %};{% endfor %}`)
	expectRender(t, p,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"t"},{"type":"video_url","video_url":{"url":"http://x/v.mp4"}},{"type":"audio_url","audio_url":{"url":"http://x/a.mp3"}},{"type":"image_url","image_url":{"url":"http://x/i.png"}}]}]}`,
		`text;video;audio;image;`)
}

// TestMidChainDottedIntegerLookup: m.content.0.type reads the first part of
// a list of parts, and is undefined on a string content's first character.
func TestMidChainDottedIntegerLookup(t *testing.T) {
	t.Parallel()
	p := shapePreparer(t, `{% for m in messages %}{% if m.content.0.type == "text" %}[{{ m.content.0.text }}]{% else %}{{ m.content }}{% endif %}{% endfor %}`)
	expectRender(t, p, `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"http://x/i.png"}}]}]}`, `[hi]`)
	expectRender(t, p, `{"messages":[{"role":"user","content":"hi"}]}`, `hi`)
}

// TestMixedContentFlattenedWithPlaceholders: a template that renders a
// content only as text, and whose source marks it as Phi-3-vision's or
// LLaVA-1.5's, gets a list mixing text and images as one text, each image
// replaced by the family's placeholder; a pass-through template gets the
// text alone; another template gets the list as it is.
func TestMixedContentFlattenedWithPlaceholders(t *testing.T) {
	t.Parallel()
	phi3v := "{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + message['content'] + '<|end|>\n' }}{% endfor %}" +
		"{% if add_generation_prompt and messages[-1]['role'] != 'assistant' %}{{- '<|assistant|>\n' -}}{% endif %}"
	expectRender(t, shapePreparer(t, phi3v),
		`{"messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"http://x/i.png"}},{"type":"text","text":" And this?"},{"type":"image_url","image_url":{"url":"http://x/j.png"}}]}]}`,
		"<|user|>\nWhat is this?<|image_1|> And this?<|image_2|><|end|>\n<|assistant|>\n")

	llava := "{% for m in messages %}{% if m.role == 'user' %}USER: {{ m.content }}\n{% else %}ASSISTANT: {{ m.content }}\n{% endif %}{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
	expectRender(t, shapePreparer(t, llava),
		`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/i.png"}},{"type":"text","text":"What is this?"}]}]}`,
		"USER: <image>What is this?\nASSISTANT:")

	// A pass-through template (NVIDIA-Nemotron-Parse's): the text alone, the
	// image read by the model's encoder beside the prompt.
	expectRender(t, shapePreparer(t, `{% for message in messages %}{{ message['content'] }}{% endfor %}`),
		`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/i.png"}},{"type":"text","text":"<predict_bbox>"}]}]}`,
		`<predict_bbox>`)

	other := `{% for m in messages %}{% for p in m.content %}{{ p.type }};{% endfor %}{% endfor %}`
	expectRender(t, shapePreparer(t, other),
		`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/i.png"}},{"type":"text","text":"What is this?"}]}]}`,
		"image;text;")
}

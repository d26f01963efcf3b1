package kv

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/tokenize"
)

// Results of KV-aware selection: continuum_dynamo_kv_selection_total{result}.
const (
	// ResultOverlap: the chosen worker held leading blocks of the prompt.
	ResultOverlap = "overlap"
	// ResultNoOverlap: KV terms counted, and the chosen worker held none.
	ResultNoOverlap = "no_overlap"
	// ResultTokenizerUnavailable: the model's workers disagree on their
	// tokenizer or template, declare none, or they are not loaded (yet).
	ResultTokenizerUnavailable = "tokenizer_unavailable"
	// ResultPromptTooLarge: the prompt is over the size bounds: its
	// rendered text over the template's output limit, or its encoding over
	// the tokenizer's.
	ResultPromptTooLarge = "prompt_too_large"
	// ResultRenderUnavailable: no render permit in time, the render failed
	// or ran out of its budgets, or the request cannot be rendered.
	ResultRenderUnavailable = "render_unavailable"
	// ResultArtifactUnpinned: an artifact the cards declare is not pinned.
	ResultArtifactUnpinned = "artifact_unpinned"
	// ResultBypass: the decode worker prefills the request itself.
	ResultBypass = "bypass"
)

// SelectionResults lists every result of a KV-aware selection.
var SelectionResults = []string{ResultOverlap, ResultNoOverlap, ResultTokenizerUnavailable, ResultPromptTooLarge,
	ResultRenderUnavailable, ResultArtifactUnpinned, ResultBypass}

// Render bounds. A render and its encoding run under a permit, at most
// permits at once (one per core, 4 to 32), so that prompt work cannot take
// every core from the requests in flight; a request that cannot get a
// permit quickly goes on without KV terms rather than queueing.
const (
	MinRenderPermits = 4
	MaxRenderPermits = 32
	// PermitWait bounds the wait for a render permit.
	PermitWait = 20 * time.Millisecond
	// RenderBudget bounds a request's whole prompt work, from the permit
	// wait through the template render to the end of the encoding: the
	// template gets what is left of it, and the encoding observes the same
	// deadline, so a permit is never held much past it.
	RenderBudget = 2 * time.Second
	// MaxBlockSizesPerRequest bounds the block sizes hashed for one
	// request; candidates of further sizes are costed as holding none of
	// the prompt (it is not hashed at their size).
	MaxBlockSizesPerRequest = 2
)

// Prompt is a request's prompt as a KV-aware picker needs it.
type Prompt struct {
	// IDs are the prompt's token ids as the frontend encodes them.
	IDs []uint32
	// Hashes are the tokens_hash of each complete block, per hashing (a
	// block size, with eagleHashing set for Eagle workers' windows).
	Hashes map[int][]uint64
	// Portable: every Dynamo frontend release encodes the request as IDs
	// are, so they may stand in for its own encoding (nvext.token_data).
	// Releases differ on a chat request's generation prompt: added unless
	// the last message is the assistant's, always, only after a user's
	// message, or as the request's add_generation_prompt and
	// continue_final_message say. IDs follow the first rule; they are
	// portable only where all agree (the last message is the user's and
	// the request asks for no other).
	Portable bool
}

// Prompts renders, encodes and hashes request prompts with the tokenizer
// and chat template the serving workers' cards declare, loaded through an
// artifact loader (nothing is loaded unless pinned). It is safe for
// concurrent use.
type Prompts struct {
	loader  *artifact.Loader
	permits chan struct{}
	budget  time.Duration // RenderBudget; tests shorten it

	mu   sync.Mutex
	snap *fleet.Snapshot
	// byModel caches, for snap, each model's agreed declarations.
	byModel map[string]declared
}

type declared struct {
	decl   []artifact.Declared
	result string // "" when the fleet agrees on usable declarations
	why    error  // what result stands for, in words
	// keepTools: every worker's card keeps a request's tools in the
	// prompt when its tool_choice is "none".
	keepTools bool
}

// NewPrompts returns prompt preparation over loader.
func NewPrompts(loader *artifact.Loader) *Prompts {
	// One per core the router may use: GOMAXPROCS follows a container's
	// CPU limit, where NumCPU counts the node's.
	n := min(max(runtime.GOMAXPROCS(0), MinRenderPermits), MaxRenderPermits)
	return &Prompts{loader: loader, permits: make(chan struct{}, n), budget: RenderBudget, byModel: map[string]declared{}}
}

// Build turns a pinned artifact's verified bytes into what Prompts uses:
// the artifact loader's build function.
func Build(ref artifact.Ref, data []byte) (any, error) {
	switch ref.Format {
	case artifact.FormatHFTokenizerJSON:
		return tokenize.Load(data)
	case artifact.FormatHFTokenizerConfigJSON:
		return configTemplate(data)
	case artifact.FormatHFChatTemplate:
		t, err := chattemplate.Compile(string(data), TemplateOptions()...)
		if err != nil {
			return nil, err
		}
		return newTemplateArtifact(t, nil, nil), nil
	case artifact.FormatHFChatTemplateJSON:
		t, toolUse, err := namedTemplates(data)
		if err != nil {
			return nil, err
		}
		return newTemplateArtifact(t, toolUse, nil), nil
	}
	return nil, fmt.Errorf("%w: %s format %q", artifact.ErrUnsupported, ref.Slot, ref.Format)
}

// TemplateOptions are the options templates are compiled with to render
// prompts as Dynamo's frontend renders them, whose tokens its workers
// cache: in minijinja's manner (its tojson writes compact, HTML-safe JSON
// where transformers writes ", " and ": ", and it prints none and true
// where Python prints None and True), and with no wall clock of the
// template's own: a render is bounded by the request's render deadline,
// which it shares with the encoding, rather than by a fixed second that
// would fail a render the budget still has room for.
func TemplateOptions() []chattemplate.Option {
	return []chattemplate.Option{chattemplate.WithTimeout(0), chattemplate.WithDynamoFrontend()}
}

// toolUseTemplate names the template a tokenizer config may give for
// requests that list tools.
const toolUseTemplate = "tool_use"

// templateArtifact is a loaded prompt_formatter or chat_template_file: a
// template (nil for a tokenizer config without one), the config's template
// named tool_use when it has one beside its default, and the special
// tokens a tokenizer config names.
type templateArtifact struct {
	tmpl    *chattemplate.Template
	toolUse *chattemplate.Template
	tokens  map[string]string
	// contentArrays: tmpl requires content lists (RequiresContentArrays),
	// probed once when the artifact is built; media how a text-only tmpl
	// marks media parts (MediaPlaceholder), likewise.
	contentArrays bool
	media         Media
}

func newTemplateArtifact(t, toolUse *chattemplate.Template, tokens map[string]string) *templateArtifact {
	return &templateArtifact{tmpl: t, toolUse: toolUse, tokens: tokens, contentArrays: RequiresContentArrays(t), media: MediaPlaceholder(t)}
}

// namedTemplates loads a tokenizer config's (or chat_template.json's)
// templates as Dynamo's frontend picks them: the one named tool_use for a
// request that lists tools (nil when the config has no such template
// beside its default, or a single template, which serves both), the
// default otherwise. A config with only a tool_use template has no
// default, and renders only requests with tools.
func namedTemplates(data []byte) (def, toolUse *chattemplate.Template, err error) {
	return ConfigTemplates(data, TemplateOptions()...)
}

// ConfigTemplates compiles a tokenizer config's default template and the
// one named tool_use, as Dynamo's frontend picks between them: tool_use
// for a request that lists tools, when the config names one beside its
// default (nil otherwise: a single template serves both), the default for
// every other request (nil when the config names only a tool_use
// template). A template that does not compile is an error, as it fails
// the frontend's loading.
func ConfigTemplates(data []byte, opts ...chattemplate.Option) (def, toolUse *chattemplate.Template, err error) {
	def, err = chattemplate.FromTokenizerConfig(data, "", opts...)
	toolUse, terr := chattemplate.FromTokenizerConfig(data, toolUseTemplate, opts...)
	switch {
	case terr != nil && !errors.Is(terr, chattemplate.ErrNoNamedTemplate):
		return nil, nil, terr
	case err != nil && errors.Is(err, chattemplate.ErrNoNamedTemplate) && terr == nil:
		return nil, toolUse, nil
	case err != nil:
		return nil, nil, err
	}
	return def, toolUse, nil
}

func configTemplate(data []byte) (*templateArtifact, error) {
	t, toolUse, err := namedTemplates(data)
	if err == nil {
		tokens := cmp.Or(t, toolUse).SpecialTokens()
		return newTemplateArtifact(t, toolUse, tokens), nil
	}
	// A config without a chat template still names the special tokens a
	// separate chat_template_file renders with.
	if strings.Contains(err.Error(), "has no chat_template") {
		empty, cerr := chattemplate.FromTokenizerConfig(withTemplate(data), "")
		if cerr != nil {
			return nil, err
		}
		return &templateArtifact{tokens: empty.SpecialTokens()}, nil
	}
	return nil, err
}

// withTemplate returns a tokenizer config with an empty chat template, to
// read its special tokens.
func withTemplate(data []byte) []byte {
	var cfg map[string]json.RawMessage
	if json.Unmarshal(data, &cfg) != nil {
		return data
	}
	cfg["chat_template"] = json.RawMessage(`""`)
	out, err := json.Marshal(cfg)
	if err != nil {
		return data
	}
	return out
}

// declarations returns a model's artifact declarations when every worker
// of the model in snap declares the same ones, else the result to count.
func (p *Prompts) declarations(snap *fleet.Snapshot, model string) declared {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.snap != snap {
		p.snap, p.byModel = snap, map[string]declared{}
	}
	if d, ok := p.byModel[model]; ok {
		return d
	}
	d := agree(snap, model)
	if len(p.byModel) < 4096 {
		p.byModel[model] = d
	}
	return d
}

// agree checks that every worker of model declares the same artifacts
// (same slots, formats and checksums): during a rolling upgrade workers may
// tokenize differently, and then no prompt hash is right for all of them.
func agree(snap *fleet.Snapshot, model string) declared {
	var first []artifact.Declared
	var firstID string
	seen, keepTools := false, true
	for w := range snap.Workers.All() {
		if w.Model != model || w.Role == fleet.RoleUnknown {
			continue
		}
		if w.Card == nil {
			return declared{result: ResultTokenizerUnavailable, why: fmt.Errorf("worker %s has no model card", w.InstanceHex())}
		}
		c := &w.Card.Typed
		keepTools = keepTools && c.Runtime.KeepToolsWhenToolChoiceNone
		ds := artifact.CardSlots(c.HFSource(), c.Tokenizer, c.PromptFormatter, c.ChatTemplateFile)
		if !seen {
			first, firstID, seen = ds, w.InstanceHex(), true
			continue
		}
		if !sameDeclarations(first, ds) {
			return declared{result: ResultTokenizerUnavailable,
				why: fmt.Errorf("workers %s and %s declare different tokenizer or template artifacts", firstID, w.InstanceHex())}
		}
	}
	switch {
	case !seen:
		return declared{result: ResultTokenizerUnavailable, why: fmt.Errorf("no worker serves model %q", model)}
	case len(first) == 0:
		return declared{result: ResultTokenizerUnavailable, why: errors.New("the model's cards declare no tokenizer or template artifact")}
	}
	return declared{decl: first, keepTools: keepTools}
}

func sameDeclarations(a, b []artifact.Declared) bool {
	return slices.EqualFunc(a, b, func(x, y artifact.Declared) bool {
		return x.Slot == y.Slot && x.Format == y.Format && x.Checksum == y.Checksum && (x.Err == nil) == (y.Err == nil)
	})
}

// preparer returns the model's loaded tokenizer and templates as a
// Preparer (without templates when the cards declare none), or the result
// to count and why.
func (p *Prompts) preparer(snap *fleet.Snapshot, model string) (Preparer, string, error) {
	d := p.declarations(snap, model)
	if d.result != "" {
		return Preparer{}, d.result, d.why
	}
	vals, err := p.loader.ResolveDeclared(model, d.decl)
	if errors.Is(err, artifact.ErrUnpinned) {
		return Preparer{}, ResultArtifactUnpinned, err
	}
	var tk *tokenize.Tokenizer
	var formatter, file *templateArtifact
	for i, v := range vals {
		switch x := v.(type) {
		case *tokenize.Tokenizer:
			tk = x
		case *templateArtifact:
			if d.decl[i].Slot == artifact.SlotChatTemplateFile {
				file = x
			} else {
				formatter = x
			}
		}
	}
	if err != nil {
		return Preparer{}, ResultTokenizerUnavailable, err
	}
	if tk == nil {
		return Preparer{}, ResultTokenizerUnavailable, errors.New("the model's cards declare no tokenizer")
	}
	pp := Preparer{Tokenizer: tk, KeepToolsWhenToolChoiceNone: d.keepTools}
	// A separate chat template file wins over the config's template; the
	// config still names the special tokens.
	tmpl := formatter
	if formatter != nil {
		pp.SpecialTokens = formatter.tokens
	}
	if file != nil && (file.tmpl != nil || file.toolUse != nil) {
		tmpl = file
	}
	if tmpl != nil {
		pp.Template, pp.ToolUse, pp.ContentArrays, pp.Media = tmpl.tmpl, tmpl.toolUse, tmpl.contentArrays, tmpl.media
	}
	return pp, "", nil
}

// maxPrefetchModels bounds the models Prefetch asks for (as many as the
// declarations it keeps).
const maxPrefetchModels = 4096

// Prefetch asks the loader for the pinned artifacts every model of snap
// declares, so that their loads start when discovery shows the model, not
// at its first request (routed by load alone while they load).
func (p *Prompts) Prefetch(snap *fleet.Snapshot) {
	seen := map[string]bool{}
	for w := range snap.Workers.All() {
		if seen[w.Model] || w.Role == fleet.RoleUnknown {
			continue
		}
		if len(seen) >= maxPrefetchModels {
			return
		}
		seen[w.Model] = true
		_, _, _ = p.preparer(snap, w.Model)
	}
}

// Diagnose says what Prepare would count, before rendering, for a request
// of model on path in snap: "" and nil when the model's tokenizer (and,
// for a chat request, its template) is loaded, else the result and why.
// An artifact still loading is an error wrapping artifact.ErrPending.
func (p *Prompts) Diagnose(snap *fleet.Snapshot, model, path string) (string, error) {
	pp, result, why := p.preparer(snap, model)
	if result != "" {
		return result, why
	}
	if path != "/v1/completions" && pp.Template == nil && pp.ToolUse == nil {
		return ResultTokenizerUnavailable, errors.New("the model's cards declare no chat template")
	}
	return "", nil
}

// Prepare renders and encodes a request's prompt (path is the endpoint,
// body the request as the frontend will receive it) and hashes its
// complete blocks for each of the given hashings (block sizes, Eagle or
// not: at most MaxBlockSizesPerRequest, each of a size MinBlockSize..
// MaxBlockSize). It returns the prompt, or the result to count when there
// is none.
//
// A request without a body has no prompt to render (it is pinned by its
// model alone): no prompt, and no result to count.
func (p *Prompts) Prepare(snap *fleet.Snapshot, model, path string, body []byte, blockSizes []int) (*Prompt, string) {
	return p.PrepareSalted(snap, model, path, body, blockSizes, "")
}

// PrepareSalted is Prepare with the blocks hashed under salt, when not
// empty, instead of the body's cache salt (pick.Request.CacheSalt).
func (p *Prompts) PrepareSalted(snap *fleet.Snapshot, model, path string, body []byte, blockSizes []int, salt string) (*Prompt, string) {
	if len(body) == 0 {
		return nil, ""
	}
	pp, result, _ := p.preparer(snap, model)
	if result != "" {
		return nil, result
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.budget)
	defer cancel()
	t := time.NewTimer(PermitWait)
	select {
	case p.permits <- struct{}{}:
		t.Stop()
	case <-t.C:
		return nil, ResultRenderUnavailable
	}
	defer func() { <-p.permits }()

	var ids []uint32
	var bodySalt string
	var err error
	switch path {
	case "/v1/completions":
		ids, bodySalt, err = pp.CompletionRequest(ctx, body)
	default:
		if pp.Template == nil && pp.ToolUse == nil {
			return nil, ResultTokenizerUnavailable
		}
		ids, bodySalt, err = pp.ChatRequest(ctx, body)
	}
	switch {
	case errors.Is(err, tokenize.ErrPromptTooLarge), errors.Is(err, chattemplate.ErrOutputTooLarge):
		// Too large to render is a prompt's size, like too many tokens:
		// the output limit (1 MiB) is met long before the token limit by
		// any chat prompt, since a token takes at least a byte.
		return nil, ResultPromptTooLarge
	case err != nil: // out of time included
		return nil, ResultRenderUnavailable
	}
	if salt == "" {
		salt = bodySalt
	}
	seed := wire.BlockHashSeed("", salt)
	pr := &Prompt{IDs: ids, Hashes: make(map[int][]uint64, len(blockSizes)), Portable: path == "/v1/completions" || generationPromptAgreed(body)}
	for _, h := range blockSizes {
		bs := hashingBlockSize(h)
		switch {
		case bs < MinBlockSize || bs > MaxBlockSize || len(pr.Hashes) >= MaxBlockSizesPerRequest:
		case h&eagleHashing != 0:
			pr.Hashes[h] = wire.EagleBlockHashes(ids, bs, seed)
		default:
			pr.Hashes[h] = wire.LocalBlockHashes(ids, bs, seed)
		}
	}
	return pr, ""
}

// Count is the size of a chat completion request's prompt (body, for the
// Dynamo model) as Prepare renders and encodes it, or the result that says
// why there is none.
func (p *Prompts) Count(snap *fleet.Snapshot, model string, body []byte) (int, string) {
	pr, result := p.Prepare(snap, model, "/v1/chat/completions", body, nil)
	if pr == nil {
		if result == "" {
			result = ResultRenderUnavailable
		}
		if result == ResultTokenizerUnavailable {
			if _, why := p.Diagnose(snap, model, "/v1/chat/completions"); errors.Is(why, artifact.ErrPending) {
				return 0, CountLoading
			}
		}
		return 0, result
	}
	return len(pr.IDs), ""
}

// CountLoading is the reason Count gives while the model's artifacts are
// still loading (a moment's wait, not a missing artifact).
const CountLoading = "artifacts_loading"

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

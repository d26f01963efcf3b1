// Package kvinspect implements `continuum kv-inspect`: the router's prompt
// pipeline by hand — token ids from a tokenizer.json, prompts rendered from
// a chat template, and the block hashes a worker's KV events will carry —
// to compare with what a worker does; and, over a live fleet, the KV index
// its kv-events build (workers) and what the KV-aware picker would choose
// for a request (match).
//
// Imports: cmdutil and engines (admin, artifact, chattemplate, config,
// discovery sources, fleet, kv, kvstack, load, pick, tokenize, wire, zmtp);
// never another command.
package kvinspect

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/tokenize"
)

// MaxLine bounds one JSON line on stdin. A prompt of the encoder's
// 1,048,576-token limit fits several times over.
const MaxLine = 64 << 20

// maxFile bounds a tokenizer, tokenizer_config or template file read from
// disk, as artifacts are bounded.
const maxFile = 64 << 20

// Options are the parsed flags of the kv-inspect subcommands.
type Options struct {
	IO *iostreams.IOStreams
	// ctx is the command's: a signal ends it, and a read of stdin with it.
	ctx context.Context

	Tokenizer       string
	TokenizerConfig string
	TemplateName    string
	Template        string
	AddSpecial      bool
	Text            string
	textSet         bool
	Dynamo          bool
	BlockSize       int
	LoRA            string
	Salt            string
}

// NewCmdKVInspect returns `continuum kv-inspect` and its subcommands.
func NewCmdKVInspect(f *cmdutil.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kv-inspect",
		Short: "Tokenize, render and hash prompts as the router does; inspect a live fleet's KV caches",
		Long: `The router's prompt pipeline by hand, to compare with a worker: token ids
from a Hugging Face tokenizer.json, prompts rendered from a chat template
(tokenizer_config.json or a .jinja file), and the XXH3 block hashes (seed
1337, LoRA and cache salt folded in) that a worker's KV events carry.
tokenize, render and hash read JSON lines on stdin and write one JSON line per
input line, blank lines skipped ({"error": "..."} for a line that fails; the
exit status is then 1); tokenize and hash also take --text for one prompt and print a table.

Over a live fleet (--config or the discovery flags): workers prints the KV
index the fleet's kv-events build, per worker rank (or a running router's,
with --router); match explains which worker the KV-aware picker would choose
for a request read on stdin, and why, without sending it.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newTokenize(f), newRender(f), newHash(f), NewCmdWorkers(f, nil), NewCmdMatch(f, nil))
	return cmd
}

func newTokenize(f *cmdutil.Factory) *cobra.Command {
	o := &Options{IO: f.IOStreams}
	cmd := &cobra.Command{
		Use:   "tokenize --tokenizer FILE",
		Short: "Token ids of text, as Hugging Face tokenizers gives them",
		Long: `Reads JSON lines {"text": "..."} on stdin and writes {"ids": [...]} per line.
With --text, prints the ids and token strings of that one text.`,
		Example: `  echo '{"text": "Hello, world"}' | continuum kv-inspect tokenize --tokenizer tokenizer.json
  continuum kv-inspect tokenize --tokenizer tokenizer.json --add-special-tokens --text "Hello"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.textSet, o.ctx = cmd.Flags().Changed("text"), cmd.Context()
			return runTokenize(o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Tokenizer, "tokenizer", "", "tokenizer.json file (required)")
	fl.BoolVar(&o.AddSpecial, "add-special-tokens", false, "add the tokenizer's special tokens (its post-processor's template)")
	fl.StringVar(&o.Text, "text", "", "one text to tokenize instead of JSON lines on stdin")
	_ = cmd.MarkFlagRequired("tokenizer")
	_ = cmd.MarkFlagFilename("tokenizer", "json")
	return cmd
}

func newRender(f *cmdutil.Factory) *cobra.Command {
	o := &Options{IO: f.IOStreams}
	cmd := &cobra.Command{
		Use:   "render {--tokenizer-config FILE | --template FILE}",
		Short: "Render chat requests with a chat template, as transformers does",
		Long: `Reads JSON lines with "messages", and optionally "tools", "documents",
"add_generation_prompt" and extra template variables (enable_thinking, ...),
and writes {"text": "..."} per line. The template comes from a
tokenizer_config.json (its chat_template, a string or a named list; pick one
with --template-name) or from a .jinja file. Rendering is sandboxed and
bounded (5,000,000 steps, 1 MiB of output, 1 s).

--dynamo renders the template as Dynamo's frontend and the router run it:
in minijinja's manner, whose tojson writes compact, HTML-safe JSON
({"type":"function",...} with <, >, & and ' as \u003c ...) where
transformers writes json.dumps' {"type": "function", ...}, and which prints
none, true and [1, "a"] where Python prints None, True and [1, 'a'].
Templates that print tools or tool-call arguments render differently. The
request is still taken as given: hash also applies the frontend's handling
of the request (text parts joined, tool schemas completed, ...).`,
		Example: `  echo '{"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true}' |
    continuum kv-inspect render --tokenizer-config tokenizer_config.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (o.TokenizerConfig == "") == (o.Template == "") {
				return cmdutil.FlagErrorf("give exactly one of --tokenizer-config and --template")
			}
			if err := templateNameApplies(o); err != nil {
				return err
			}
			o.ctx = cmd.Context()
			return runRender(o)
		},
	}
	addTemplateFlags(cmd, o)
	cmd.Flags().BoolVar(&o.Dynamo, "dynamo", false, "render as Dynamo's frontend does (minijinja's tojson and printing)")
	return cmd
}

func newHash(f *cmdutil.Factory) *cobra.Command {
	o := &Options{IO: f.IOStreams}
	cmd := &cobra.Command{
		Use:   "hash --tokenizer FILE --block-size N",
		Short: "Token ids and per-block KV hashes of a prompt or chat request",
		Long: `Reads JSON lines, each a raw prompt {"text": "..."} or a chat completion
request body {"messages": [...], ...} (rendered with --tokenizer-config or
--template), and writes {"ids": [...], "block_hashes": [...]} per line: the
tokens_hash of every complete block, XXH3-64 over the block's ids as
little-endian u32 with seed 1337, plus the LoRA adapter's and the cache
salt's terms when given.

A chat request goes through the router's own path, as Dynamo's frontend
renders it: in minijinja's manner (see render --dynamo), messages and tools
shaped as the frontend's typed structs write them back (their fields in the
structs' order, null optional fields and unknown fields dropped), content
lists of text parts only joined by newlines (unless the template renders
text only from such lists: then every text is given as one), tools without
a parameter type given an object schema, the generation prompt added unless the last message is
the assistant's (whatever add_generation_prompt the request gives, at the top
level or in chat_template_kwargs), and only chat_template_kwargs entries
become template variables (other top-level keys such as model or temperature
do not), besides thinking and reasoning_effort, which the frontend folds into
them (thinking, thinking_mode, enable_thinking, reasoning_effort). Its
nvext.cache_salt (else cache_salt)
wins over --salt. The rendered prompt is encoded without added special tokens
(the template places them); --add-special-tokens applies to raw prompts.`,
		Example: `  echo '{"text": "Hello"}' | continuum kv-inspect hash --tokenizer tokenizer.json --block-size 16
  continuum kv-inspect hash --tokenizer tokenizer.json --block-size 64 --lora adapter-a --text "$(cat prompt.txt)"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.textSet, o.ctx = cmd.Flags().Changed("text"), cmd.Context()
			if o.TokenizerConfig != "" && o.Template != "" {
				return cmdutil.FlagErrorf("give at most one of --tokenizer-config and --template")
			}
			if err := templateNameApplies(o); err != nil {
				return err
			}
			if o.BlockSize < kv.MinBlockSize || o.BlockSize > kv.MaxBlockSize {
				return cmdutil.FlagErrorf("--block-size %d: want %d..%d", o.BlockSize, kv.MinBlockSize, kv.MaxBlockSize)
			}
			return runHash(o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Tokenizer, "tokenizer", "", "tokenizer.json file (required)")
	fl.IntVar(&o.BlockSize, "block-size", 0, "the workers' kv_cache_block_size (16..65536; required)")
	fl.StringVar(&o.LoRA, "lora", "", "LoRA adapter name folded into the hash seed")
	fl.StringVar(&o.Salt, "salt", "", "cache salt folded into the hash seed")
	fl.BoolVar(&o.AddSpecial, "add-special-tokens", false, "add the tokenizer's special tokens to raw prompts")
	fl.StringVar(&o.Text, "text", "", "one raw prompt instead of JSON lines on stdin")
	_ = cmd.MarkFlagRequired("tokenizer")
	_ = cmd.MarkFlagRequired("block-size")
	_ = cmd.MarkFlagFilename("tokenizer", "json")
	addTemplateFlags(cmd, o)
	return cmd
}

// templateNameApplies refuses --template-name without --tokenizer-config:
// only a tokenizer_config.json holds named templates, so with a .jinja
// file, or no template, the name would be ignored and the prompt rendered
// with another template than the one asked for (or none).
func templateNameApplies(o *Options) error {
	if o.TemplateName != "" && o.TokenizerConfig == "" {
		return cmdutil.FlagErrorf("--template-name picks a named template of --tokenizer-config: add --tokenizer-config, or drop --template-name")
	}
	return nil
}

func addTemplateFlags(cmd *cobra.Command, o *Options) {
	fl := cmd.Flags()
	fl.StringVar(&o.TokenizerConfig, "tokenizer-config", "", "tokenizer_config.json holding the chat template")
	fl.StringVar(&o.TemplateName, "template-name", "", "which named chat template of --tokenizer-config (default: \"default\")")
	fl.StringVar(&o.Template, "template", "", "a chat template file (.jinja)")
	_ = cmd.MarkFlagFilename("tokenizer-config", "json")
	_ = cmd.MarkFlagFilename("template", "jinja")
}

func readFile(path string) ([]byte, error) {
	b, err := config.ReadFile(path, maxFile)
	if err != nil {
		return nil, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: err}
	}
	return b, nil
}

func loadTokenizer(path string) (*tokenize.Tokenizer, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	t, err := tokenize.Load(b)
	if err != nil {
		return nil, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: fmt.Errorf("%s: %w", path, err)}
	}
	return t, nil
}

// loadTemplate returns the template the flags name, compiled with opts, or
// nil when none.
func loadTemplate(o *Options, opts ...chattemplate.Option) (*chattemplate.Template, error) {
	var (
		t    *chattemplate.Template
		err  error
		path string
	)
	switch {
	case o.TokenizerConfig != "":
		path = o.TokenizerConfig
		var b []byte
		if b, err = readFile(path); err != nil {
			return nil, err
		}
		t, err = chattemplate.FromTokenizerConfig(b, o.TemplateName, opts...)
	case o.Template != "":
		path = o.Template
		var b []byte
		if b, err = readFile(path); err != nil {
			return nil, err
		}
		t, err = chattemplate.Compile(string(b), opts...)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: fmt.Errorf("%s: %w", path, err)}
	}
	return t, nil
}

// eachLine calls fn for every JSON line on stdin and writes what it returns,
// or {"error": ...}. Lines longer than MaxLine fail on their own.
func eachLine(o *Options, fn func(line []byte) (any, error)) error {
	if o.IO.IsStdinTTY() {
		return cmdutil.FlagErrorf("pipe JSON lines on stdin, or give --text")
	}
	r := bufio.NewReaderSize(cmdutil.Interruptible(o.ctx, o.IO.In), 64<<10)
	enc := json.NewEncoder(o.IO.Out)
	enc.SetEscapeHTML(false)
	failed := 0
	var buf []byte
	for n := 1; ; n++ {
		line, tooLong, err := readLine(r, &buf)
		if len(bytes.TrimSpace(line)) > 0 || tooLong {
			var out any
			var ferr error
			if tooLong {
				ferr = fmt.Errorf("line longer than %d bytes", MaxLine)
			} else {
				out, ferr = fn(line)
			}
			if ferr != nil {
				failed++
				out = map[string]string{"error": ferr.Error()}
				fmt.Fprintf(o.IO.ErrOut, "line %d: %v\n", n, ferr)
			}
			if werr := enc.Encode(out); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if failed > 0 {
		return cmdutil.Exit(cmdutil.ExitFailure)
	}
	return nil
}

// readLine reads one line into *buf (without its newline), keeping at most
// MaxLine bytes; a longer line is consumed and reported as too long.
func readLine(r *bufio.Reader, buf *[]byte) (line []byte, tooLong bool, err error) {
	*buf = (*buf)[:0]
	for {
		chunk, err := r.ReadSlice('\n')
		if len(*buf)+len(chunk) > MaxLine+1 {
			tooLong = true
		} else {
			*buf = append(*buf, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(*buf, []byte("\n")), tooLong, err
	}
}

type textLine struct {
	Text *string `json:"text"`
}

func decodeText(line []byte) (string, error) {
	var l textLine
	if err := json.Unmarshal(line, &l); err != nil {
		return "", fmt.Errorf("not a JSON object with \"text\": %w", err)
	}
	if l.Text == nil {
		return "", errors.New(`no "text"`)
	}
	return *l.Text, nil
}

func runTokenize(o *Options) error {
	tok, err := loadTokenizer(o.Tokenizer)
	if err != nil {
		return err
	}
	if o.textSet {
		ids, err := tok.Encode(o.Text, o.AddSpecial)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(o.IO.Out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "#\tID\tTOKEN")
		for i, id := range ids {
			s, _ := tok.IDToToken(id)
			fmt.Fprintf(tw, "%d\t%d\t%s\n", i, id, strconv.Quote(s))
		}
		return tw.Flush()
	}
	return eachLine(o, func(line []byte) (any, error) {
		text, err := decodeText(line)
		if err != nil {
			return nil, err
		}
		ids, err := tok.Encode(text, o.AddSpecial)
		if err != nil {
			return nil, err
		}
		return map[string]any{"ids": nonNil(ids)}, nil
	})
}

func runRender(o *Options) error {
	opts := []chattemplate.Option{chattemplate.WithTimeout(chattemplate.DefaultTimeout)}
	if o.Dynamo {
		opts = append(opts, chattemplate.WithDynamoFrontend())
	}
	tmpl, err := loadTemplate(o, opts...)
	if err != nil {
		return err
	}
	return eachLine(o, func(line []byte) (any, error) {
		// A line without messages (a misspelled member, a tokenize line)
		// would render the empty conversation as if asked to. Members
		// are matched by their exact names, as the render reads them.
		var m map[string]json.RawMessage
		if json.Unmarshal(line, &m) == nil && (len(m["messages"]) == 0 || string(m["messages"]) == "null") {
			return nil, errors.New(`want "messages"`)
		}
		in, err := chattemplate.DecodeRequestKwargs(line)
		if err != nil {
			return nil, err
		}
		text, err := tmpl.Render(context.Background(), in)
		if err != nil {
			return nil, err
		}
		return map[string]string{"text": text}, nil
	})
}

type hashLine struct {
	Text     *string         `json:"text"`
	Messages json.RawMessage `json:"messages"`
}

func runHash(o *Options) error {
	tok, err := loadTokenizer(o.Tokenizer)
	if err != nil {
		return err
	}
	// As the router builds templates: as Dynamo's frontend renders, no
	// clock of their own (a render runs to its request's render deadline).
	p := &kv.Preparer{Tokenizer: tok}
	if o.TokenizerConfig != "" && o.TemplateName == "" {
		// As the router loads a config: its tool_use template, when it
		// names one, renders the requests that list tools.
		b, err := readFile(o.TokenizerConfig)
		if err != nil {
			return err
		}
		if p.Template, p.ToolUse, err = kv.ConfigTemplates(b, kv.TemplateOptions()...); err != nil {
			return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: fmt.Errorf("%s: %w", o.TokenizerConfig, err)}
		}
	} else if p.Template, err = loadTemplate(o, kv.TemplateOptions()...); err != nil {
		return err
	}
	p.ContentArrays = kv.RequiresContentArrays(p.Template)
	seed := wire.BlockHashSeed(o.LoRA, o.Salt)
	if o.textSet {
		ids, err := p.Text(o.Text, o.AddSpecial)
		if err != nil {
			return err
		}
		hashes, err := kv.BlockHashes(ids, o.BlockSize, seed)
		if err != nil {
			return err
		}
		fmt.Fprintf(o.IO.Out, "%d tokens, %d complete blocks of %d, seed %d\n", len(ids), len(hashes), o.BlockSize, seed)
		tw := tabwriter.NewWriter(o.IO.Out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "BLOCK\tTOKENS\tTOKENS_HASH\tHEX")
		for i, h := range hashes {
			fmt.Fprintf(tw, "%d\t%d-%d\t%d\t%016x\n", i, i*o.BlockSize, (i+1)*o.BlockSize-1, h, h)
		}
		return tw.Flush()
	}
	return eachLine(o, func(line []byte) (any, error) {
		var l hashLine
		if err := json.Unmarshal(line, &l); err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
		var ids []uint32
		lineSeed := seed
		switch {
		case len(l.Messages) > 0:
			// The router's own path: the request as Dynamo's frontend
			// renders it, within the router's render budget.
			ctx, cancel := context.WithTimeout(context.Background(), kv.RenderBudget)
			var salt string
			ids, salt, err = p.ChatRequest(ctx, line)
			cancel()
			if err != nil {
				return nil, err
			}
			if salt != "" {
				lineSeed = wire.BlockHashSeed(o.LoRA, salt)
			}
		case l.Text != nil:
			if ids, err = p.Text(*l.Text, o.AddSpecial); err != nil {
				return nil, err
			}
		default:
			return nil, errors.New(`want "text" or "messages"`)
		}
		hashes, err := kv.BlockHashes(ids, o.BlockSize, lineSeed)
		if err != nil {
			return nil, err
		}
		return map[string]any{"ids": nonNil(ids), "block_hashes": nonNil(hashes)}, nil
	})
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

package cli_test

import (
	"context"
	"iter"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/testutil"
)

var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// TestReadmeConfigsValidate runs `continuum config validate` on every YAML
// example in the README: each must exit 0.
func TestReadmeConfigsValidate(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := yamlBlock.FindAllSubmatch(readme, -1)
	if len(blocks) == 0 {
		t.Fatal("no yaml examples in the README")
	}
	for i, b := range blocks {
		file := filepath.Join(t.TempDir(), "example.yaml")
		if err := os.WriteFile(file, b[1], 0o600); err != nil {
			t.Fatal(err)
		}
		ios, _, out, errOut := iostreams.Test()
		f := &cmdutil.Factory{IOStreams: ios, Env: func(string) (string, bool) { return "x", true }}
		if code := cli.Run(context.Background(), f, []string{"config", "validate", file}); code != 0 {
			t.Errorf("README example %d: exit %d\n%s%s", i+1, code, out, errOut)
		}
	}
}

var shBlock = regexp.MustCompile("(?s)```sh\n(.*?)```")

// TestReadmeCommandLinesParse: every `continuum` command line in the
// README's shell examples names a command that exists, with flags it takes
// and an argument count it accepts, so an example cannot drift from the
// command tree (what each one does is tested with its command).
func TestReadmeCommandLinesParse(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, b := range shBlock.FindAllSubmatch(readme, -1) {
		for seg, words := range commandLines(string(b[1])) {
			n++
			if err := parseCommandLine(words); err != nil {
				t.Errorf("README: %s: %v", seg, err)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d continuum command lines found in the README", n)
	}
}

// commandLines yields each `continuum` command of a shell text (lines
// joined at a trailing backslash, pipelines split) with its words.
func commandLines(text string) iter.Seq2[string, []string] {
	return func(yield func(string, []string) bool) {
		text = strings.ReplaceAll(text, "\\\n", " ")
		for line := range strings.SplitSeq(text, "\n") {
			for seg := range strings.SplitSeq(line, "|") {
				words := shellWords(seg)
				if len(words) == 0 || words[0] != "continuum" {
					continue
				}
				if !yield(strings.TrimSpace(seg), words) {
					return
				}
			}
		}
	}
}

// parseCommandLine finds the command words name in a fresh command tree
// and parses its flags and argument count, running nothing.
func parseCommandLine(words []string) error {
	ios, _, _, _ := iostreams.Test()
	root := cli.NewRootCmd(&cmdutil.Factory{IOStreams: ios})
	c, rest, err := root.Find(words[1:])
	if err == nil {
		err = c.ParseFlags(rest)
	}
	if err == nil {
		err = c.ValidateArgs(c.Flags().Args())
	}
	return err
}

// shellWords splits a command line as sh would for these examples: quotes
// group; a "# comment", a redirection and a trailing "&" end it; "$VAR"
// stays a word.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == '#' && !in:
			return words
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case r == '&' || r == '<' || r == '>':
			return append(words, strings.Fields(cur.String())...) // a redirection or "&" ends the command
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// TestHelpExamplesParse: the Examples of every command's --help (and man
// page) parse against the command tree, as the README's do.
func TestHelpExamplesParse(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	root := cli.NewRootCmd(&cmdutil.Factory{IOStreams: ios})
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		for seg, words := range commandLines(c.Example) {
			n++
			if err := parseCommandLine(words); err != nil {
				t.Errorf("%s example: %s: %v", c.CommandPath(), seg, err)
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	if n < 20 {
		t.Fatalf("only %d examples found", n)
	}
}

package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// docsDate is the date printed in generated man pages; fixed so that
// regenerating them changes nothing unless the command tree changed.
var docsDate = time.Date(2026, time.November, 30, 0, 0, 0, 0, time.UTC)

// GenerateDocs writes the man pages to <dir>/man and the shell completions
// to <dir>/completions, from the command tree itself.
func GenerateDocs(dir string) error {
	ios, _, _, _ := iostreams.Test()
	root := NewRootCmd(&cmdutil.Factory{IOStreams: ios, Build: cmdutil.BuildInfo{Version: "docs"}})
	manDir := filepath.Join(dir, "man")
	compDir := filepath.Join(dir, "completions")
	for _, d := range []string{manDir, compDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	header := &doc.GenManHeader{Title: "CONTINUUM", Section: "1", Source: "Continuum", Manual: "Continuum Manual", Date: &docsDate}
	escapeForMan(root)
	if err := doc.GenManTree(root, header, manDir); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	gens := map[string]func(*bytes.Buffer) error{
		"continuum.bash": func(b *bytes.Buffer) error { return root.GenBashCompletionV2(b, true) },
		"continuum.zsh":  func(b *bytes.Buffer) error { return root.GenZshCompletion(b) },
		"continuum.fish": func(b *bytes.Buffer) error { return root.GenFishCompletion(b, true) },
		"continuum.ps1":  func(b *bytes.Buffer) error { return root.GenPowerShellCompletionWithDesc(b) },
	}
	for name, gen := range gens {
		var b bytes.Buffer
		if err := gen(&b); err != nil {
			return fmt.Errorf("completion %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(compDir, name), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// escapeForMan escapes what the man pages' Markdown would otherwise take
// for markup in every command's long description: placeholders in angle
// brackets (<hex>, <instance id>), read as HTML tags and dropped, and
// underscores, which pair into emphasis (continuum_broker_* printed as
// continuum*broker**). Code (lines indented four spaces or a tab, and
// spans in backticks) is left as it is, since an escape there would print.
// The tree is GenerateDocs' own.
func escapeForMan(cmd *cobra.Command) {
	lines := strings.Split(cmd.Long, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t") {
			continue
		}
		spans := strings.Split(l, "`")
		for j := 0; j < len(spans); j += 2 { // the even spans are outside backticks
			spans[j] = strings.ReplaceAll(placeholder.ReplaceAllString(spans[j], `\<$1\>`), "_", `\_`)
		}
		lines[i] = strings.Join(spans, "`")
	}
	cmd.Long = strings.Join(lines, "\n")
	for _, c := range cmd.Commands() {
		escapeForMan(c)
	}
}

var placeholder = regexp.MustCompile(`<([A-Za-z][A-Za-z0-9 _.-]*)>`)

package configcmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// ValidateOptions are the parsed flags and dependencies of `config validate`.
type ValidateOptions struct {
	IO     *iostreams.IOStreams
	Env    config.LookupEnv
	Files  []string
	Strict bool
	Format string
}

var validateFormats = []string{"text", "json", "github"}

// NewCmdValidate returns `config validate`. runF replaces the run step in tests.
func NewCmdValidate(f *cmdutil.Factory, runF func(*ValidateOptions) error) *cobra.Command {
	opts := &ValidateOptions{IO: f.IOStreams, Env: f.Env}
	cmd := &cobra.Command{
		Use:   "validate [FILE...]",
		Short: "Check configuration files against every rule serve applies",
		Long: `Check configuration files against every rule continuum serve applies, and
print each finding with its severity, key path, file, line and column.

The file is judged, not the machine: certificate and artifact files it names
need not exist here (serve reports them at start), and a ${VAR} whose
variable is not set here is a warning, its value left unchecked (serve
refuses the file unless the variable is set where it runs).

Exit status: 0 when no file has errors (warnings are allowed), 1 when any file
has an error (or a warning, with --strict), 2 when a file cannot be read or
is not YAML.`,
		Example: `  continuum config validate continuum.yaml
  continuum config validate --strict --format github deploy/*.yaml`,
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return []string{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Files = args
			if len(opts.Files) == 0 {
				if p := f.ConfigPath(); p != "" {
					opts.Files = []string{p}
				}
			}
			if len(opts.Files) == 0 {
				return cmdutil.FlagErrorf("no configuration file: pass FILE, --config, or set CONTINUUM_CONFIG")
			}
			if err := cmdutil.OneOf("--format", opts.Format, validateFormats); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return validateRun(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Strict, "strict", false, "fail (exit 1) on warnings too")
	cmd.Flags().StringVar(&opts.Format, "format", "text", "output format: text, json or github (workflow annotations)")
	cmdutil.RegisterEnumCompletion(cmd, "format", validateFormats)
	return cmd
}

// fileResult is the outcome for one file; Err is set when it was unreadable.
type fileResult struct {
	File     string
	Err      error
	Findings config.Findings
}

func validateRun(opts *ValidateOptions) error {
	results := make([]fileResult, 0, len(opts.Files))
	for _, file := range opts.Files {
		doc, err := config.Load(file, config.Options{Env: opts.Env, UnsetEnvWarns: true})
		r := fileResult{File: file, Err: err}
		if doc != nil {
			r.Findings = doc.Findings
		}
		results = append(results, r)
	}
	var err error
	switch opts.Format {
	case "json":
		err = writeJSON(opts.IO.Out, results, opts.Strict)
	case "github":
		err = writeGitHub(opts.IO.Out, results)
	default:
		err = writeText(opts.IO, results, opts.Strict)
	}
	if err != nil {
		return err
	}
	return cmdutil.Exit(exitCode(results, opts.Strict))
}

func exitCode(results []fileResult, strict bool) int {
	code := cmdutil.ExitOK
	for _, r := range results {
		switch {
		case r.Err != nil:
			return cmdutil.ExitUsage
		case r.Findings.Errors() > 0, strict && r.Findings.Warnings() > 0:
			code = cmdutil.ExitFailure
		}
	}
	return code
}

func writeText(ios *iostreams.IOStreams, results []fileResult, strict bool) error {
	w := ios.Out
	sev := func(s config.Severity) string {
		if !ios.ColorEnabled() {
			return s.String()
		}
		if s == config.SeverityError {
			return "\x1b[31merror\x1b[0m"
		}
		return "\x1b[33mwarning\x1b[0m"
	}
	for _, r := range results {
		if r.Err != nil {
			if _, err := fmt.Fprintf(w, "%s: cannot load: %s\n", r.File, describeUnreadable(r.File, r.Err)); err != nil {
				return err
			}
			continue
		}
		for _, f := range r.Findings {
			if _, err := fmt.Fprintf(w, "%s:%d:%d: %s: %s: %s\n", f.File, f.Line, f.Column, sev(f.Severity), f.DisplayPath(), f.Message); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintf(w, "%s: %s\n", r.File, summary(r.Findings, strict)); err != nil {
			return err
		}
	}
	return nil
}

// describeUnreadable is why file could not be read, without the file's
// name, which the line already starts with.
func describeUnreadable(file string, err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == file {
		return pe.Op + ": " + pe.Err.Error()
	}
	msg := strings.TrimPrefix(err.Error(), config.ErrUnreadable.Error()+": ")
	return strings.TrimPrefix(strings.TrimPrefix(msg, file+": "), file+" ")
}

func summary(fs config.Findings, strict bool) string {
	e, w := fs.Errors(), fs.Warnings()
	if e == 0 && w == 0 {
		return "valid"
	}
	word := "valid"
	switch {
	case e > 0:
		word = "invalid"
	case strict: // warnings fail the check: the line says so, as the exit code does
		word = "invalid under --strict"
	}
	return fmt.Sprintf("%s (%s, %s)", word, plural(e, "error"), plural(w, "warning"))
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

type jsonReport struct {
	Valid bool       `json:"valid"`
	Files []jsonFile `json:"files"`
}

type jsonFile struct {
	File     string           `json:"file"`
	Valid    bool             `json:"valid"`
	Error    string           `json:"error,omitempty"`
	Errors   int              `json:"errors"`
	Warnings int              `json:"warnings"`
	Findings []config.Finding `json:"findings"`
}

func writeJSON(w io.Writer, results []fileResult, strict bool) error {
	rep := jsonReport{Valid: exitCode(results, strict) == cmdutil.ExitOK, Files: []jsonFile{}}
	for _, r := range results {
		jf := jsonFile{File: r.File, Findings: r.Findings, Errors: r.Findings.Errors(), Warnings: r.Findings.Warnings()}
		if jf.Findings == nil {
			jf.Findings = config.Findings{}
		}
		if r.Err != nil {
			jf.Error = describeUnreadable(r.File, r.Err)
		}
		jf.Valid = r.Err == nil && jf.Errors == 0 && (!strict || jf.Warnings == 0)
		rep.Files = append(rep.Files, jf)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// writeGitHub prints workflow commands that GitHub Actions shows as
// annotations on the file.
func writeGitHub(w io.Writer, results []fileResult) error {
	for _, r := range results {
		if r.Err != nil {
			if _, err := fmt.Fprintf(w, "::error file=%s::%s\n", ghProperty(r.File), ghData("cannot load: "+describeUnreadable(r.File, r.Err))); err != nil {
				return err
			}
			continue
		}
		for _, f := range r.Findings {
			_, err := fmt.Fprintf(w, "::%s file=%s,line=%d,col=%d::%s\n", f.Severity, ghProperty(f.File), f.Line, f.Column, ghData(f.DisplayPath()+": "+f.Message))
			if err != nil {
				return err
			}
		}
	}
	return nil
}

var (
	ghDataEscaper     = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A")
	ghPropertyEscaper = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C")
)

func ghData(s string) string     { return ghDataEscaper.Replace(s) }
func ghProperty(s string) string { return ghPropertyEscaper.Replace(s) }

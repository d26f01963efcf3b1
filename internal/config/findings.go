package config

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
)

// Severity says whether a finding fails validation.
type Severity int

// Severities, in increasing order.
const (
	SeverityWarning Severity = iota + 1
	SeverityError
)

func (s Severity) String() string {
	if s == SeverityError {
		return "error"
	}
	return "warning"
}

// MarshalText renders the severity as "error" or "warning".
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// droppedFindings counts the findings left out past MaxFindings, by
// severity.
type droppedFindings struct{ errors, warnings int }

func (d *droppedFindings) add(o droppedFindings) {
	d.errors += o.errors
	d.warnings += o.warnings
}

// summary is the finding that stands for those left out, nil when none
// was: an error when one of them is, so that a file with only warnings
// left out stays valid.
func (d droppedFindings) summary(file string) *Finding {
	n := d.errors + d.warnings
	if n == 0 {
		return nil
	}
	f := &Finding{Severity: SeverityWarning, File: file, Line: 1, Column: 1,
		Message: fmt.Sprintf("%d more warnings are not shown", n)}
	if d.errors > 0 {
		f.Severity = SeverityError
		f.Message = fmt.Sprintf("%d more findings are not shown (%d errors, %d warnings); fix the ones above first", n, d.errors, d.warnings)
	}
	return f
}

// admit keeps f within MaxFindings, held counting the findings kept
// elsewhere against the same bound: past it an error takes the place of
// the last warning of list or, failing that, of spill (so errors are never
// hidden behind warnings), and whatever is left out is counted in d.
func (d *droppedFindings) admit(list *Findings, spill Findings, held int, f Finding) {
	if len(*list)+held < MaxFindings {
		*list = append(*list, f)
		return
	}
	if f.Severity == SeverityError && (replaceWarning(*list, f) || replaceWarning(spill, f)) {
		d.warnings++
		return
	}
	if f.Severity == SeverityError {
		d.errors++
	} else {
		d.warnings++
	}
}

// replaceWarning puts f in the place of list's last warning, reporting
// whether there was one.
func replaceWarning(list Findings, f Finding) bool {
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].Severity != SeverityError {
			list[i] = f
			return true
		}
	}
	return false
}

// Finding is one validation result, located in the file it came from.
type Finding struct {
	Severity Severity `json:"severity"`
	// Path is the dotted key path with indexes: dynamo.discovery.etcd.endpoints[1].
	Path    string `json:"path"`
	Message string `json:"message"`
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
}

func (f Finding) String() string {
	return fmt.Sprintf("%s:%d:%d: %s: %s: %s", f.File, f.Line, f.Column, f.Severity, f.DisplayPath(), f.Message)
}

// DisplayPath is the path for people: "(document)" for the file as a whole.
func (f Finding) DisplayPath() string {
	if f.Path == "" {
		return "(document)"
	}
	return f.Path
}

// Findings is a sorted list of findings.
type Findings []Finding

// Errors counts error findings.
func (fs Findings) Errors() int { return fs.count(SeverityError) }

// ErrorCount is the number of error findings in words: "1 error",
// "2 errors".
func (fs Findings) ErrorCount() string {
	if n := fs.Errors(); n != 1 {
		return strconv.Itoa(n) + " errors"
	}
	return "1 error"
}

// Warnings counts warning findings.
func (fs Findings) Warnings() int { return fs.count(SeverityWarning) }

func (fs Findings) count(s Severity) int {
	n := 0
	for _, f := range fs {
		if f.Severity == s {
			n++
		}
	}
	return n
}

func sortFindings(fs Findings) {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(
			cmp.Compare(a.File, b.File),
			cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Column, b.Column),
			cmp.Compare(b.Severity, a.Severity),
			cmp.Compare(a.Path, b.Path),
			cmp.Compare(a.Message, b.Message),
		)
	})
}

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

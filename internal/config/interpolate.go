package config

import (
	"fmt"
	"strings"
)

// unsetVarError is a ${NAME} reference to a variable that is not set.
type unsetVarError struct{ name string }

func (e *unsetVarError) Error() string {
	return fmt.Sprintf("environment variable %s is not set", e.name)
}

// LookupEnv finds an environment variable; os.LookupEnv in production.
type LookupEnv func(name string) (string, bool)

// interpolate replaces every ${NAME} in s with the variable's value. "$${"
// writes a literal "${". An unset variable or a malformed reference is an
// error that names it.
func interpolate(s string, env LookupEnv) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' {
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			return "", fmt.Errorf("unterminated variable reference %q: close it with '}' or write '$${' for a literal '${'", s[i:])
		}
		name := s[i+2 : i+2+end]
		if !validVarName(name) {
			return "", fmt.Errorf("invalid variable name %q in ${...}: use letters, digits and '_', not starting with a digit", name)
		}
		v, ok := env(name)
		if !ok {
			return "", &unsetVarError{name}
		}
		b.WriteString(v)
		s = s[i+2+end+1:]
	}
}

func validVarName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

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
// writes a literal "${". An unset variable is an error that names it; a
// malformed reference, one that says where it is (the value may be a
// secret, and is not quoted).
func interpolate(s string, env LookupEnv) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	pos := 0 // bytes of the value consumed before s
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' {
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s, pos = s[i+2:], pos+i+2
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			// The value is not quoted: it may be a secret that holds
			// "${" by chance, and findings go to CI logs and the admin API.
			return "", fmt.Errorf("unterminated variable reference: the '${' at byte %d of the value has no '}'; close it or write '$${' for a literal '${'", pos+i+1)
		}
		name := s[i+2 : i+2+end]
		if !validVarName(name) {
			return "", fmt.Errorf("invalid variable name in the '${...}' at byte %d of the value: use letters, digits and '_', not starting with a digit (or write '$${' for a literal '${')", pos+i+1)
		}
		v, ok := env(name)
		if !ok {
			return "", &unsetVarError{name}
		}
		b.WriteString(v)
		s, pos = s[i+2+end+1:], pos+i+2+end+1
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

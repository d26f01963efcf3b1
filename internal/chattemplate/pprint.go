package chattemplate

import (
	"sort"
	"strings"
	"unicode/utf8"
)

// Jinja's pprint filter is Python's pprint.pformat: the repr with dict keys
// sorted, and, where that passes 80 columns, dicts, lists and tuples one
// item a line and long strings cut into adjacent literals.

const pprintWidth = 80

// pformat is pprint.pformat(v) with the default settings (indent 1, width
// 80, dicts sorted, not compact).
func pformat(v any) string {
	var b strings.Builder
	pprintValue(&b, v, 0, 0, 0)
	return b.String()
}

// sortedDictItems orders a dict's items by key, as pprint does; keys that
// do not compare keep their order.
func sortedDictItems(d *Dict) []int {
	order := make([]int, len(d.keys))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool {
		c, err := compare(d.keys[order[i]], d.keys[order[j]])
		return err == nil && c < 0
	})
	return order
}

// sortedRepr is the repr pprint writes: dicts with their keys sorted, at
// every depth.
func sortedRepr(v any, depth int) string {
	if depth > maxNesting {
		return "..."
	}
	switch x := v.(type) {
	case *Dict:
		var b strings.Builder
		b.WriteByte('{')
		for n, i := range sortedDictItems(x) {
			if n > 0 {
				b.WriteString(", ")
			}
			b.WriteString(sortedRepr(x.keys[i], depth+1))
			b.WriteString(": ")
			b.WriteString(sortedRepr(x.vals[i], depth+1))
		}
		b.WriteByte('}')
		return b.String()
	case *List:
		if x.group {
			break
		}
		var b strings.Builder
		open, closing := "[", "]"
		if x.Tuple {
			open, closing = "(", ")"
		}
		b.WriteString(open)
		for i, it := range x.Items {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(sortedRepr(it, depth+1))
		}
		if x.Tuple && len(x.Items) == 1 {
			b.WriteByte(',')
		}
		b.WriteString(closing)
		return b.String()
	}
	return toReprString(v)
}

func runeLen(s string) int { return utf8.RuneCountInString(s) }

// pprintValue writes v at the given indent, keeping allowance columns free
// at the end of its last line.
func pprintValue(b *strings.Builder, v any, indent, allowance, level int) {
	rep := sortedRepr(v, level)
	if runeLen(rep) <= pprintWidth-indent-allowance || level > maxNesting {
		b.WriteString(rep)
		return
	}
	switch x := v.(type) {
	case *Dict:
		b.WriteByte('{')
		if x.Len() > 0 {
			pprintDictItems(b, x, indent, allowance+1, level+1)
		}
		b.WriteByte('}')
		return
	case *List:
		if x.Tuple {
			end := ")"
			if len(x.Items) == 1 {
				end = ",)"
			}
			b.WriteByte('(')
			pprintItems(b, x.Items, indent, allowance+len(end), level+1)
			b.WriteString(end)
			return
		}
		b.WriteByte('[')
		pprintItems(b, x.Items, indent, allowance+1, level+1)
		b.WriteByte(']')
		return
	case string:
		pprintString(b, x, indent, allowance, level+1)
		return
	}
	b.WriteString(rep)
}

func pprintDictItems(b *strings.Builder, d *Dict, indent, allowance, level int) {
	indent++
	order := sortedDictItems(d)
	for n, i := range order {
		last := n == len(order)-1
		krep := sortedRepr(d.keys[i], level)
		b.WriteString(krep)
		b.WriteString(": ")
		a := 1
		if last {
			a = allowance
		}
		pprintValue(b, d.vals[i], indent+runeLen(krep)+2, a, level)
		if !last {
			b.WriteString(",\n" + strings.Repeat(" ", indent))
		}
	}
}

func pprintItems(b *strings.Builder, items []any, indent, allowance, level int) {
	indent++
	for i, it := range items {
		last := i == len(items)-1
		if i > 0 {
			b.WriteString(",\n" + strings.Repeat(" ", indent))
		}
		a := 1
		if last {
			a = allowance
		}
		pprintValue(b, it, indent, a, level)
	}
}

// wordRuns splits a line as pprint does (the pattern \S*\s*): runs of
// non-space characters, each with the spaces after it, spaces as Python's
// str.isspace has them.
func wordRuns(line string) []string {
	var parts []string
	for line != "" {
		i := strings.IndexFunc(line, pyIsSpace)
		if i < 0 {
			return append(parts, line)
		}
		j := strings.IndexFunc(line[i:], func(c rune) bool { return !pyIsSpace(c) })
		if j < 0 {
			return append(parts, line)
		}
		parts = append(parts, line[:i+j])
		line = line[i+j:]
	}
	return parts
}

// pprintString cuts a string too long for its line into adjacent string
// literals at line ends and between words, in parentheses at the top level.
func pprintString(b *strings.Builder, s string, indent, allowance, level int) {
	if s == "" {
		b.WriteString(toReprString(s))
		return
	}
	var chunks []string
	var lines []string
	for _, l := range splitLines(s, true) {
		lines = append(lines, l.(string))
	}
	if level == 1 {
		indent++
		allowance++
	}
	maxWidth1 := pprintWidth - indent
	maxWidth := maxWidth1
	rep := ""
	for i, line := range lines {
		rep = toReprString(line)
		if i == len(lines)-1 {
			maxWidth1 -= allowance
		}
		if runeLen(rep) <= maxWidth1 {
			chunks = append(chunks, rep)
			continue
		}
		parts := wordRuns(line)
		maxWidth2 := maxWidth
		current := ""
		for j, part := range parts {
			candidate := current + part
			if j == len(parts)-1 && i == len(lines)-1 {
				maxWidth2 -= allowance
			}
			if runeLen(toReprString(candidate)) > maxWidth2 {
				if current != "" {
					chunks = append(chunks, toReprString(current))
				}
				current = part
			} else {
				current = candidate
			}
		}
		if current != "" {
			chunks = append(chunks, toReprString(current))
		}
	}
	if len(chunks) == 1 {
		b.WriteString(rep)
		return
	}
	if level == 1 {
		b.WriteByte('(')
	}
	for i, c := range chunks {
		if i > 0 {
			b.WriteString("\n" + strings.Repeat(" ", indent))
		}
		b.WriteString(c)
	}
	if level == 1 {
		b.WriteByte(')')
	}
}

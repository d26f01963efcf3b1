package chattemplate

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// Values inside the interpreter are Go values of these types: nil (None),
// bool, int64, float64, string, *List, *Dict, *Namespace, undefined,
// *macro, *loopInfo, *builtin and *boundMethod.

// bigInt is a JSON integer beyond 64 bits, kept as its decimal text so it
// prints and serializes as Python does; arithmetic on it is an error.
type bigInt string

// undefined is Jinja's default Undefined: it prints as "", is false, iterates
// as empty, and fails on attribute access or arithmetic.
type undefined struct {
	name string
	// owner and attr name a missing attribute; its message ("'<owner>
	// object' has no attribute '<attr>'") is written only when an error
	// needs it, since templates probe absent fields all the time.
	owner, attr string
}

// List is a Python list (or tuple when Tuple is set).
type List struct {
	Items []any
	Tuple bool
	// group marks the (grouper, list) tuples of the groupby filter, whose
	// items are also the attributes grouper and list.
	group bool
}

// Dict is an insertion-ordered mapping, the interpreter's form of a JSON
// object or a Python dict. Keys are strings, ints, floats, bools or nil.
type Dict struct {
	keys []any
	vals []any
	idx  map[any]int
}

// NewDict returns an empty Dict.
func NewDict() *Dict { return &Dict{} }

// Len returns the number of entries.
func (d *Dict) Len() int { return len(d.keys) }

// Keys returns the keys in insertion order.
func (d *Dict) Keys() []any { return d.keys }

func hashKey(k any) any {
	switch v := k.(type) {
	case bool:
		if v {
			return int64(1)
		}
		return int64(0)
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<62 {
			return int64(v)
		}
	case undefined:
		// Jinja's undefined values are equal to one another.
		return undefinedKey{}
	case *List:
		var b strings.Builder
		writeTupleKey(&b, v)
		return tupleKey(b.String())
	}
	return k
}

// undefinedKey and tupleKey are the map keys of an undefined value and of
// a tuple (its items' keys written out), distinct from every string.
type (
	undefinedKey struct{}
	tupleKey     string
)

func writeTupleKey(b *strings.Builder, l *List) {
	b.WriteByte('(')
	for _, it := range l.Items {
		switch x := hashKey(it).(type) {
		case tupleKey:
			b.WriteString(string(x))
		case string:
			b.WriteString(strconv.Quote(x))
		case undefinedKey:
			b.WriteString("U")
		default:
			fmt.Fprintf(b, "%T:%v", x, x)
		}
		b.WriteByte(',')
	}
	b.WriteByte(')')
}

// isHashable is whether Python can hash k: scalars, undefined values, and
// tuples of hashable items.
func isHashable(k any) bool {
	switch x := k.(type) {
	case nil, bool, int64, float64, string, bigInt, undefined:
		return true
	case *List:
		if !x.Tuple {
			return false
		}
		for _, it := range x.Items {
			if !isHashable(it) {
				return false
			}
		}
		return true
	}
	return false
}

// Set adds or replaces the entry for key k.
func (d *Dict) Set(k, v any) {
	h := hashKey(k)
	if i, ok := d.idx[h]; ok {
		d.vals[i] = v
		return
	}
	if d.idx == nil {
		// Small dicts are searched linearly; the index is built past 8 keys.
		if len(d.keys) < 8 {
			for i, kk := range d.keys {
				if hashKey(kk) == h {
					d.vals[i] = v
					return
				}
			}
			d.keys = append(d.keys, k)
			d.vals = append(d.vals, v)
			return
		}
		d.idx = make(map[any]int, len(d.keys)*2)
		for i, kk := range d.keys {
			d.idx[hashKey(kk)] = i
		}
	}
	d.idx[h] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
}

// Get returns the value for key k.
func (d *Dict) Get(k any) (any, bool) {
	if d == nil {
		return nil, false
	}
	h := hashKey(k)
	if d.idx != nil {
		i, ok := d.idx[h]
		if !ok {
			return nil, false
		}
		return d.vals[i], true
	}
	if s, ok := h.(string); ok {
		for i, kk := range d.keys {
			if ks, ok := kk.(string); ok && ks == s {
				return d.vals[i], true
			}
		}
		return nil, false
	}
	for i, kk := range d.keys {
		if hashKey(kk) == h {
			return d.vals[i], true
		}
	}
	return nil, false
}

// Namespace is the object namespace() returns: attributes may be assigned
// with {% set ns.x = ... %}.
type Namespace struct{ d *Dict }

// mjMap is the namespace as minijinja holds it: a map whose attributes are
// kept in a BTreeMap (namespace_object.rs), so in key order whatever order
// they were set in. Dynamo's frontend prints it and writes its tojson as
// that map.
func (n *Namespace) mjMap() *Dict {
	keys := make([]string, 0, n.d.Len())
	for _, k := range n.d.keys {
		if s, ok := k.(string); ok {
			keys = append(keys, s)
		}
	}
	sort.Strings(keys)
	out := &Dict{}
	for _, k := range keys {
		v, _ := n.d.Get(k)
		out.Set(k, v)
	}
	return out
}

// cycler is what the cycler global gives: a position over fixed items.
// Each render makes its own, so the state is never shared.
type cycler struct {
	items []any
	pos   int
}

type builtin struct {
	name string
	fn   func(r *renderer, args []any, kw *Dict) (any, error)
}

type boundMethod struct {
	recv any
	name string
}

// typeName returns Python's type name for v, for error messages.
func typeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64, bigInt:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case *List:
		if x.Tuple {
			return "tuple"
		}
		return "list"
	case *Dict:
		return "dict"
	case *Namespace:
		return "Namespace"
	case undefined:
		return "Undefined"
	case *macro:
		return "Macro"
	case *loopInfo:
		return "LoopContext"
	case *cycler:
		return "Cycler"
	case *builtin, *boundMethod:
		return "builtin_function_or_method"
	}
	return fmt.Sprintf("%T", v)
}

// errUndefined is the error of using an undefined value.
func errUndefined(u undefined) error {
	if msg := u.message(); msg != "" {
		return errors.New(msg)
	}
	return errors.New("undefined value used")
}

func (u undefined) message() string {
	if u.attr != "" {
		return fmt.Sprintf("'%s object' has no attribute '%s'", u.owner, u.attr)
	}
	return u.name
}

func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case *List:
		return len(x.Items) > 0
	case *Dict:
		return x.Len() > 0
	case undefined:
		return false
	}
	return true // bigInt is never zero
}

// toStr is Python's str(v) (Undefined prints as "").
func toStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(x, 10)
	case bigInt:
		return string(x)
	case float64:
		return pyFloat(x)
	case undefined:
		return ""
	}
	checkContainerText(v)
	var b strings.Builder
	writeRepr(&b, v, 0)
	return b.String()
}

// str is how the template prints v: Python's str, or minijinja's Display
// when the template renders as Dynamo's frontend does. The text of a list
// or dict is measured before it is built: one over the output limit ends
// the render (ErrOutputTooLarge), and the walk is paid for in fuel.
func (r *renderer) str(v any) string {
	switch v.(type) {
	case *List, *Dict, *Namespace:
		var m textMeasure
		m.walk(v, r.maxOutput, 0)
		if m.bytes > r.maxOutput {
			panic(abort{r.overflow()})
		}
		if err := r.step(int64(m.items) + int64(m.bytes>>6) + 1); err != nil {
			panic(abort{err})
		}
	}
	if r.dynamo {
		return minijinjaStr(v)
	}
	return toStr(v)
}

// abort carries a render's error out of code with no error result (a
// value's text, built deep inside filters and operators): Render recovers
// it and fails with its error.
type abort struct{ err error }

// maxContainerText bounds the text of a list or dict built anywhere (an
// attribute name, a format argument) where the renderer's own limit is not
// at hand: the default output limit, past which no render's output can go.
const maxContainerText = DefaultMaxOutput

// textMeasure is a lower bound of the bytes of a value's text (its
// strings' bytes, one byte for any other scalar, two for each bracket pair
// and separator) and the items it walked to find it. The walk stops once
// the bytes pass the limit, so it visits at most about limit/2 items
// whatever the value holds (a list repeated by *, which shares its items,
// has text far larger than its memory).
type textMeasure struct {
	bytes, items int
	// pretty counts, for each item, the line break and indent pprint
	// may give it.
	pretty bool
}

func (m *textMeasure) walk(v any, limit, depth int) {
	if m.bytes > limit || depth > maxNesting {
		return
	}
	m.items++
	if m.pretty {
		m.bytes += depth + 2
	}
	switch x := v.(type) {
	case string:
		m.bytes += len(x)
	case *List:
		m.bytes += 2
		for _, it := range x.Items {
			if m.bytes > limit {
				return
			}
			m.bytes += 2
			m.walk(it, limit, depth+1)
		}
	case *Dict:
		m.bytes += 2
		for i, k := range x.keys {
			if m.bytes > limit {
				return
			}
			m.bytes += 4
			m.walk(k, limit, depth+1)
			m.walk(x.vals[i], limit, depth+1)
		}
	case *Namespace:
		m.walk(x.d, limit, depth+1)
	default:
		m.bytes++
	}
}

// checkContainerText ends the render when v's text would pass
// maxContainerText.
func checkContainerText(v any) {
	var m textMeasure
	m.walk(v, maxContainerText, 0)
	if m.bytes > maxContainerText {
		panic(abort{fmt.Errorf("%w: %w: more than %d bytes", ErrRenderUnavailable, ErrOutputTooLarge, maxContainerText)})
	}
}

// minijinjaStr is minijinja's Display of a value: none, true and false in
// lower case, floats always with a decimal point and never in exponent
// form, lists and dicts as [a, b] and {k: v} with their strings quoted as
// Rust's Debug quotes them.
func minijinjaStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case undefined:
		return ""
	case *Namespace:
		return minijinjaStr(x.mjMap())
	case *List, *Dict:
		checkContainerText(v)
		var b strings.Builder
		writeMinijinjaDebug(&b, v, 0)
		return b.String()
	}
	return minijinjaScalar(v)
}

// minijinjaScalar is minijinja's Display of a value that is not a string,
// a list or a dict.
func minijinjaScalar(v any) string {
	switch x := v.(type) {
	case nil:
		return "none"
	case bool:
		if x {
			return "true"
		}
		return "false"
	case float64:
		switch {
		case math.IsNaN(x):
			return "NaN"
		case math.IsInf(x, 1):
			return "inf"
		case math.IsInf(x, -1):
			return "-inf"
		}
		s := strconv.FormatFloat(x, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s
	}
	return toStr(v)
}

// writeMinijinjaDebug writes minijinja's Debug of a value, which its
// Display of lists and dicts uses for their items.
func writeMinijinjaDebug(b *strings.Builder, v any, depth int) {
	if depth > maxNesting {
		b.WriteString("...")
		return
	}
	switch x := v.(type) {
	case string:
		rustDebugStr(b, x)
	case undefined:
		b.WriteString("undefined")
	case *List:
		b.WriteString("[")
		writeItems(b, x.Items, depth, writeMinijinjaDebug)
		b.WriteString("]")
	case *Dict:
		writeDict(b, x, depth, writeMinijinjaDebug)
	case *Namespace:
		writeDict(b, x.mjMap(), depth, writeMinijinjaDebug)
	case float64:
		b.WriteString(rustDebugFloat(x))
	default:
		b.WriteString(minijinjaScalar(v))
	}
}

// rustDebugFloat is Rust's Debug of an f64, which minijinja prints the
// floats inside a list or a dict with: the shortest digits, as a decimal
// with at least one fractional digit when 1e-4 <= |x| < 1e16 (or x is 0),
// else in exponent form without a plus sign (1e16, 1.5e-7).
func rustDebugFloat(x float64) string {
	switch {
	case math.IsNaN(x):
		return "NaN"
	case math.IsInf(x, 1):
		return "inf"
	case math.IsInf(x, -1):
		return "-inf"
	}
	if a := math.Abs(x); a == 0 || a >= 1e-4 && a < 1e16 {
		return minijinjaScalar(x)
	}
	s := strconv.FormatFloat(x, 'e', -1, 64)
	mant, exp, _ := strings.Cut(s, "e")
	e, _ := strconv.Atoi(exp)
	return mant + "e" + strconv.Itoa(e)
}

// rustDebugStr quotes s as Rust's Debug of a str: double quotes, with \,
// ", \n, \r, \t and \0 escaped, and as \u{hex} every character that is
// not printable (controls, format characters, spaces but U+0020, private
// use, unassigned) or that extends a grapheme (combining marks, variation
// selectors, ZWNJ), wherever it stands.
func rustDebugStr(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, c := range s {
		switch c {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case 0:
			b.WriteString(`\0`)
		default:
			if !unicode.IsPrint(c) || unicode.In(c, unicode.Mn, unicode.Me, unicode.Other_Grapheme_Extend) {
				fmt.Fprintf(b, `\u{%x}`, c)
			} else {
				b.WriteRune(c)
			}
		}
	}
	b.WriteByte('"')
}

// pyFloat is Python's repr of a float.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expS, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expS)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign = "-"
			exp = -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s = strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

func pyStrRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case pyPrintable(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
}

// pyPrintable is Python's str.isprintable for one character: not a control,
// format, surrogate, private-use, unassigned or separator character, but
// the space.
func pyPrintable(r rune) bool {
	if r == ' ' {
		return true
	}
	if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Cs, unicode.Co, unicode.Zl, unicode.Zp, unicode.Zs) {
		return false
	}
	return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S)
}

// writeRepr writes Python's repr of v.
func writeRepr(b *strings.Builder, v any, depth int) {
	if depth > maxNesting {
		b.WriteString("...")
		return
	}
	switch x := v.(type) {
	case string:
		pyStrRepr(b, x)
	case *List:
		open, closing := "[", "]"
		if x.Tuple {
			open, closing = "(", ")"
		}
		b.WriteString(open)
		writeItems(b, x.Items, depth, writeRepr)
		if x.Tuple && len(x.Items) == 1 {
			b.WriteString(",")
		}
		b.WriteString(closing)
	case *Dict:
		writeDict(b, x, depth, writeRepr)
	case *Namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, x.d, depth+1)
		b.WriteString(">")
	case undefined:
		b.WriteString("Undefined")
	case *macro:
		b.WriteString("<Macro '" + x.name + "'>")
	case *loopInfo:
		b.WriteString("<LoopContext>")
	case *cycler:
		b.WriteString("<Cycler>")
	case *builtin:
		b.WriteString("<built-in function " + x.name + ">")
	case *boundMethod:
		b.WriteString("<built-in method " + x.name + ">")
	default:
		b.WriteString(toStr(v))
	}
}

// writeItems writes items separated by ", ", each with write one level
// deeper.
func writeItems(b *strings.Builder, items []any, depth int, write func(*strings.Builder, any, int)) {
	for i, it := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		write(b, it, depth+1)
	}
}

// writeDict writes d as {k: v, ...}, keys and values with write one level
// deeper.
func writeDict(b *strings.Builder, d *Dict, depth int, write func(*strings.Builder, any, int)) {
	b.WriteString("{")
	for i, k := range d.keys {
		if i > 0 {
			b.WriteString(", ")
		}
		write(b, k, depth+1)
		b.WriteString(": ")
		write(b, d.vals[i], depth+1)
	}
	b.WriteString("}")
}

// maxNesting bounds recursion over nested values and parser nesting.
const maxNesting = 200

// equal is Python's ==.
func equal(a, b any) bool {
	return equalDepth(a, b, 0, false)
}

// mjEqual is minijinja's ==: as Python's, but a tuple equals the list of
// the same items (minijinja has sequences only).
func mjEqual(a, b any) bool {
	return equalDepth(a, b, 0, true)
}

func equalDepth(a, b any, depth int, anySeq bool) bool {
	if depth > maxNesting {
		return false
	}
	if fa, ok := asNumber(a); ok {
		if fb, ok := asNumber(b); ok {
			ia, aInt := intOf(a)
			ib, bInt := intOf(b)
			switch {
			case aInt && bInt:
				return ia == ib
			case aInt:
				return !math.IsNaN(fb) && cmpIntFloat(ia, fb) == 0
			case bInt:
				return !math.IsNaN(fa) && cmpIntFloat(ib, fa) == 0
			}
			return fa == fb
		}
		return false
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case *List:
		y, ok := b.(*List)
		if !ok || x.Tuple != y.Tuple && !anySeq || len(x.Items) != len(y.Items) {
			return false
		}
		for i := range x.Items {
			if !equalDepth(x.Items[i], y.Items[i], depth+1, anySeq) {
				return false
			}
		}
		return true
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for i, k := range x.keys {
			v, ok := y.Get(k)
			if !ok || !equalDepth(x.vals[i], v, depth+1, anySeq) {
				return false
			}
		}
		return true
	case undefined:
		_, ok := b.(undefined)
		return ok
	}
	return a == b
}

// asNumber returns v as a float when it is a bool, int or float.
func asNumber(v any) (float64, bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

func intOf(v any) (int64, bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case int64:
		return x, true
	}
	return 0, false
}

// compare is Python's ordering: -1, 0 or 1, or an error for unorderable types.
func compare(a, b any) (int, error) { return compareDepth(a, b, 0) }

func compareDepth(a, b any, depth int) (int, error) {
	if depth > maxNesting {
		return 0, errors.New("comparison nested too deeply")
	}
	if _, ok := asNumber(a); ok {
		if _, ok := asNumber(b); ok {
			ia, aInt := intOf(a)
			ib, bInt := intOf(b)
			fa, _ := asNumber(a)
			fb, _ := asNumber(b)
			switch {
			case aInt && bInt:
				return cmpOrdered(ia, ib), nil
			case aInt && !math.IsNaN(fb):
				return cmpIntFloat(ia, fb), nil
			case bInt && !math.IsNaN(fa):
				return -cmpIntFloat(ib, fa), nil
			}
			return cmpOrdered(fa, fb), nil
		}
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), nil
		}
	case *List:
		if y, ok := b.(*List); ok && x.Tuple == y.Tuple {
			for i := 0; i < len(x.Items) && i < len(y.Items); i++ {
				if equal(x.Items[i], y.Items[i]) {
					continue
				}
				return compareDepth(x.Items[i], y.Items[i], depth+1)
			}
			return cmpOrdered(len(x.Items), len(y.Items)), nil
		}
	}
	return 0, fmt.Errorf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

// mjKind ranks a value's kind as minijinja orders values of different
// kinds (its ValueKind order): undefined, none, bools, numbers, strings,
// sequences, maps, then anything else. A bool is a kind of its own, not
// a number, so false < -2 and true < 0.5 are true (== still takes true
// as 1).
func mjKind(v any) int {
	switch v.(type) {
	case undefined:
		return 0
	case nil:
		return 1
	case bool:
		return 2
	case int64, float64, bigInt:
		return 3
	case string:
		return 4
	case *List:
		return 5
	case *Dict:
		return 6
	}
	return mjKindOther
}

// mjKindOther is mjKind's rank of anything else (macros, namespaces, ...).
const mjKindOther = 7

// mjCompare is minijinja's ordering: within a kind as Python's (a tuple
// and a list alike; maps by their items), across kinds by kind
// (mjKind), never an error but for nesting too deep.
func mjCompare(a, b any, depth int) (int, error) {
	if depth > maxNesting {
		return 0, errors.New("comparison nested too deeply")
	}
	ka, kb := mjKind(a), mjKind(b)
	if ka != kb {
		return cmpOrdered(ka, kb), nil
	}
	switch x := a.(type) {
	case *List:
		y := b.(*List)
		for i := 0; i < len(x.Items) && i < len(y.Items); i++ {
			if c, err := mjCompare(x.Items[i], y.Items[i], depth+1); c != 0 || err != nil {
				return c, err
			}
		}
		return cmpOrdered(len(x.Items), len(y.Items)), nil
	case *Dict:
		y := b.(*Dict)
		for i := 0; i < len(x.keys) && i < len(y.keys); i++ {
			if c, err := mjCompare(x.keys[i], y.keys[i], depth+1); c != 0 || err != nil {
				return c, err
			}
			if c, err := mjCompare(x.vals[i], y.vals[i], depth+1); c != 0 || err != nil {
				return c, err
			}
		}
		return cmpOrdered(len(x.keys), len(y.keys)), nil
	case undefined, nil:
		return 0, nil
	}
	if ka == mjKindOther {
		return 0, nil
	}
	return compare(a, b)
}

// cmpIntFloat orders an integer and a float (not NaN) by their exact
// values, as Python does: through float64 the integers beyond 2**53 would
// round (2**53+1 would equal 2.0**53).
func cmpIntFloat(i int64, f float64) int {
	switch {
	case f >= 1<<63:
		return -1
	case f < -(1 << 63):
		return 1
	}
	whole := math.Trunc(f)
	if c := cmpOrdered(i, int64(whole)); c != 0 {
		return c
	}
	return cmpOrdered(whole, f) // the fraction decides
}

func cmpOrdered[T int | int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// fromGo converts a caller's Go value into an interpreter value. Maps with
// string keys become Dicts in sorted key order (use *Dict or DecodeJSON to
// keep an order).
func fromGo(v any, depth int) (any, error) {
	if depth > maxNesting {
		return nil, errors.New("input nested too deeply")
	}
	switch x := v.(type) {
	case nil, bool, int64, float64, string, *Dict, undefined, bigInt:
		return v, nil
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint:
		if uint64(x) > math.MaxInt64 {
			return float64(x), nil
		}
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			return float64(x), nil
		}
		return int64(x), nil
	case float32:
		return float64(x), nil
	case *List:
		return x, nil
	case []any:
		out := make([]any, len(x))
		for i, it := range x {
			c, err := fromGo(it, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return &List{Items: out}, nil
	case []string:
		out := make([]any, len(x))
		for i, it := range x {
			out[i] = it
		}
		return &List{Items: out}, nil
	case []map[string]any:
		out := make([]any, len(x))
		for i, it := range x {
			c, err := fromGo(it, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return &List{Items: out}, nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := &Dict{}
		for _, k := range keys {
			c, err := fromGo(x[k], depth+1)
			if err != nil {
				return nil, err
			}
			d.Set(k, c)
		}
		return d, nil
	case map[string]string:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := &Dict{}
		for _, k := range keys {
			d.Set(k, x[k])
		}
		return d, nil
	}
	return nil, fmt.Errorf("unsupported input value of type %T", v)
}

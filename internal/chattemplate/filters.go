package chattemplate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// args is a helper for positional-or-keyword parameters.
type argList struct {
	pos []any
	kw  *Dict
}

func (a argList) get(i int, name string) (any, bool) {
	if i >= 0 && i < len(a.pos) {
		return a.pos[i], true
	}
	if v, ok := a.kw.Get(name); ok {
		return v, true
	}
	return nil, false
}

func (a argList) str(i int, name, def string) (string, error) {
	v, ok := a.get(i, name)
	if !ok || v == nil {
		return def, nil
	}
	if u, ok := v.(undefined); ok {
		_ = u
		return def, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s must be a string, not %s", name, typeName(v))
	}
	return s, nil
}

func (a argList) integer(i int, name string, def int64) (int64, error) {
	v, ok := a.get(i, name)
	if !ok || v == nil {
		return def, nil
	}
	n, ok := intOf(v)
	if !ok {
		return 0, fmt.Errorf("%s must be an integer, not %s", name, typeName(v))
	}
	return n, nil
}

// itemKey reads the case_sensitive and attribute arguments of unique,
// min and max, and returns what they compare items by, as Jinja does: the
// attribute when given, case folded unless case_sensitive.
func (a argList) itemKey() (func(any) any, error) {
	cs := a.boolean(0, "case_sensitive", false)
	attr, err := a.str(1, "attribute", "")
	if err != nil {
		return nil, err
	}
	return func(x any) any {
		if attr != "" {
			x, _ = attrPath(x, attr)
		}
		if !cs {
			x = foldCase(x)
		}
		return x
	}, nil
}

func (a argList) boolean(i int, name string, def bool) bool {
	v, ok := a.get(i, name)
	if !ok {
		return def
	}
	return truthy(v)
}

func (r *renderer) applyFilter(f *filterExpr, v any, s *scope) (any, error) {
	args, err := r.evalList(f.args, s)
	if err != nil {
		return nil, err
	}
	kw, err := r.evalKwargs(f.kwName, f.kwVal, s)
	if err != nil {
		return nil, err
	}
	return r.filter(f.name, v, argList{pos: args, kw: kw})
}

func seqItems(v any) ([]any, error) {
	switch x := v.(type) {
	case *List:
		return x.Items, nil
	case *Dict:
		return x.keys, nil
	case string:
		out := make([]any, 0, len(x))
		for _, c := range x {
			out = append(out, string(c))
		}
		return out, nil
	case undefined:
		return nil, nil
	}
	return nil, fmt.Errorf("'%s' object is not iterable", typeName(v))
}

func pyLen(v any) (int64, error) {
	switch x := v.(type) {
	case string:
		return int64(utf8.RuneCountInString(x)), nil
	case *List:
		return int64(len(x.Items)), nil
	case *Dict:
		return int64(x.Len()), nil
	case undefined:
		return 0, nil
	case *Namespace:
		return int64(x.d.Len()), nil
	}
	return 0, fmt.Errorf("object of type '%s' has no len()", typeName(v))
}

func (r *renderer) filter(name string, v any, a argList) (any, error) {
	if r.dynamo && !mjFilters[name] {
		// minijinja looks a filter up when it applies it.
		return nil, fmt.Errorf("no filter named '%s'", name)
	}
	if max, fixed := mjFilterArgs[name]; fixed && r.dynamo {
		// minijinja's built-in filters take a fixed number of arguments:
		// one more fails; a filter without parameters takes no keyword
		// arguments either.
		kw := a.kw != nil && a.kw.Len() > 0
		if len(a.pos) > max || max == 0 && kw {
			return nil, errors.New("too many arguments")
		}
	}
	if v == nil && r.dynamo {
		switch name {
		case "list", "unique", "min", "max", "sum", "batch", "slice", "join", "map", "select", "reject", "selectattr", "rejectattr",
			"groupby", "sort":
			v = &List{} // minijinja iterates none as an empty sequence
		case "reverse":
			return nil, nil // and gives none back reversed
		}
	}
	if _, undef := v.(undefined); undef && r.dynamo && name == "reverse" {
		// minijinja gives an undefined value back reversed, as none.
		return v, nil
	}
	if _, undef := v.(undefined); undef && r.dynamo && (name == "first" || name == "last") {
		// minijinja: an undefined value has no first or last item.
		return nil, fmt.Errorf("cannot get %s item from value", name)
	}
	switch name {
	case "tojson":
		return r.toJSON(v, a)
	case "length", "count":
		n, err := pyLen(v)
		if r.dynamo {
			_, undef := v.(undefined)
			switch {
			case name == "length" && err != nil:
				// Dynamo's frontend's own length filter: 0 for anything
				// without a length, none and undefined values included.
				return int64(0), nil
			case name == "count" && undef:
				return nil, errors.New("cannot calculate length of value of type undefined")
			}
		}
		return n, err
	case "string", "safe":
		return r.str(v), nil
	case "trim":
		chars, err := a.str(0, "chars", "")
		if err != nil {
			return nil, err
		}
		_, has := a.get(0, "chars")
		return pyStrip(r.str(v), chars, has && chars != "", true, true), nil
	case "upper":
		return pyUpper(r.str(v)), nil
	case "lower":
		return pyLower(r.str(v)), nil
	case "capitalize":
		return pyCapitalize(r.str(v)), nil
	case "title":
		if r.dynamo {
			return mjTitle(r.str(v)), nil
		}
		return jinjaTitle(r.str(v)), nil
	case "default", "d":
		def, _ := a.get(0, "default_value")
		if _, ok := a.get(0, "default_value"); !ok {
			def = ""
		}
		if _, isU := v.(undefined); isU || a.boolean(1, "boolean", false) && !truthy(v) {
			return def, nil
		}
		return v, nil
	case "first":
		items, err := seqItems(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return undefined{name: "No first item, sequence was empty."}, nil
		}
		return items[0], nil
	case "last":
		items, err := seqItems(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return undefined{name: "No last item, sequence was empty."}, nil
		}
		return items[len(items)-1], nil
	case "list":
		items, err := seqItems(v)
		if err != nil {
			return nil, err
		}
		if err := r.chargeItems(len(items)); err != nil {
			return nil, err
		}
		return &List{Items: append([]any{}, items...)}, nil
	case "items":
		switch x := v.(type) {
		case undefined:
			if r.dynamo {
				// minijinja takes pairs of a mapping only; Jinja2 gives
				// an undefined value no pairs.
				return nil, errors.New("cannot convert value into pairs")
			}
			return &List{Items: []any{}}, nil
		case *Dict:
			out := make([]any, x.Len())
			for i, k := range x.keys {
				out[i] = &List{Items: []any{k, x.vals[i]}, Tuple: true}
			}
			return &List{Items: out}, nil
		}
		return nil, fmt.Errorf("can only get item pairs from a mapping")
	case "join":
		return r.join(v, a)
	case "int":
		if r.dynamo {
			return mjInt(v, a)
		}
		if u, ok := v.(undefined); ok {
			return nil, errUndefined(u)
		}
		return toInt(v, a)
	case "float":
		if r.dynamo {
			return mjFloat(v, a)
		}
		if u, ok := v.(undefined); ok {
			return nil, errUndefined(u)
		}
		// The default comes back untouched when the conversion fails.
		var def any = 0.0
		if d, ok := a.get(0, "default"); ok {
			def = d
		}
		switch x := v.(type) {
		case string:
			if f, ok := pyParseFloat(x); ok {
				return f, nil
			}
			return def, nil
		}
		if f, ok := asNumber(v); ok {
			return f, nil
		}
		return def, nil
	case "abs":
		switch x := v.(type) {
		case int64:
			if x == math.MinInt64 {
				return nil, errors.New("integer overflow") // 2**63 is not a 64-bit integer
			}
			if x < 0 {
				return -x, nil
			}
			return x, nil
		case bool:
			if r.dynamo {
				// A bool is no number in minijinja: its abs is an error.
				return nil, errors.New("cannot get absolute value")
			}
			i, _ := intOf(x)
			return i, nil
		case float64:
			return math.Abs(x), nil
		}
		return nil, fmt.Errorf("bad operand type for abs(): '%s'", typeName(v))
	case "round":
		prec, err := a.integer(0, "precision", 0)
		if err != nil {
			return nil, err
		}
		if r.dynamo {
			return mjRound(v, prec, a)
		}
		method, err := a.str(1, "method", "common")
		if err != nil {
			return nil, err
		}
		if u, ok := v.(undefined); ok {
			return nil, errUndefined(u)
		}
		if i, isInt := intOf(v); isInt && method == "common" {
			return roundInt(i, prec)
		}
		f, ok := asNumber(v)
		if !ok {
			return nil, fmt.Errorf("round of %s", typeName(v))
		}
		p := math.Pow(10, float64(prec))
		switch method {
		case "ceil":
			return math.Ceil(f*p) / p, nil
		case "floor":
			return math.Floor(f*p) / p, nil
		}
		return pyRound(f, prec), nil
	case "replace":
		s := r.str(v)
		old, err := a.str(0, "old", "")
		if err != nil {
			return nil, err
		}
		nw, err := a.str(1, "new", "")
		if err != nil {
			return nil, err
		}
		cnt, err := a.integer(2, "count", -1)
		if err != nil {
			return nil, err
		}
		return r.replace(s, old, nw, cnt)
	case "reverse":
		switch x := v.(type) {
		case string:
			if err := r.chargeBytes(len(x)); err != nil {
				return nil, err
			}
			rs := []rune(x)
			for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
				rs[i], rs[j] = rs[j], rs[i]
			}
			return string(rs), nil
		}
		items, err := seqItems(v)
		if err != nil {
			return nil, err
		}
		if err := r.chargeItems(len(items)); err != nil {
			return nil, err
		}
		out := make([]any, len(items))
		for i, it := range items {
			out[len(items)-1-i] = it
		}
		return &List{Items: out}, nil
	case "map":
		return r.mapFilter(v, a)
	case "select", "reject":
		return r.selectFilter(v, a, name == "select", false)
	case "selectattr", "rejectattr":
		return r.selectFilter(v, a, name == "selectattr", true)
	case "sort":
		return r.sortFilter(v, a)
	case "unique":
		items, err := seqItems(v)
		if err != nil {
			return nil, err
		}
		key, err := a.itemKey()
		if err != nil {
			return nil, err
		}
		if err := r.step(int64(len(items))); err != nil {
			return nil, err
		}
		// As Python's set of seen keys: hashKey makes equal keys (1, 1.0
		// and True; equal tuples) the same map key.
		out := []any{}
		seen := make(map[any]bool, len(items))
		var unhashable []any // keys of the Dynamo mode's unhashable items
	items:
		for _, it := range items {
			k := key(it)
			if !isHashable(k) && r.dynamo {
				// minijinja's unique keeps the first of equal items of any
				// kind, lists and maps too (Python's set refuses them).
				for _, u := range unhashable {
					if r.equal(u, k) {
						continue items
					}
				}
				if err := r.step(int64(len(unhashable))); err != nil {
					return nil, err
				}
				unhashable = append(unhashable, k)
				out = append(out, it)
				continue
			}
			if !isHashable(k) {
				return nil, fmt.Errorf("unhashable type: '%s'", typeName(k))
			}
			h := hashKey(k)
			if b, isBool := k.(bool); isBool && r.dynamo {
				// A bool is no number in minijinja: true and 1 are both kept.
				h = mjBoolKey(b)
			}
			if !seen[h] {
				seen[h] = true
				out = append(out, it)
			}
		}
		return &List{Items: out}, nil
	case "min", "max":
		items, err := seqItems(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return undefined{name: "no " + name + " item, sequence was empty"}, nil
		}
		// The first of equal items wins.
		key, err := a.itemKey()
		if err != nil {
			return nil, err
		}
		if err := r.step(int64(len(items))); err != nil {
			return nil, err
		}
		best := items[0]
		for _, it := range items[1:] {
			c, err := r.compare(key(it), key(best))
			if err != nil {
				return nil, err
			}
			if name == "min" && c < 0 || name == "max" && c > 0 {
				best = it
			}
		}
		return best, nil
	case "sum":
		items, err := seqItems(v)
		if err != nil {
			return nil, err
		}
		var total any = int64(0)
		if st, ok := a.get(1, "start"); ok {
			total = st
		}
		attr, _ := a.str(0, "attribute", "")
		if err := r.step(int64(len(items))); err != nil {
			return nil, err
		}
		for _, it := range items {
			if attr != "" {
				if it, err = attrPath(it, attr); err != nil {
					return nil, err
				}
			}
			if _, isBool := it.(bool); isBool && r.dynamo {
				// A bool is no number in minijinja: summing one is an error.
				return nil, errors.New("can only sum numbers, got bool")
			}
			if total, err = r.binop("+", total, it); err != nil {
				return nil, err
			}
		}
		return total, nil
	case "indent":
		return r.indent(v, a)
	case "dictsort":
		d, ok := v.(*Dict)
		if !ok {
			return nil, errors.New("dictsort expects a mapping")
		}
		caseSensitive := a.boolean(0, "case_sensitive", false)
		idx := 0
		switch by, _ := a.str(1, "by", "key"); by {
		case "key":
		case "value":
			idx = 1
		default:
			return nil, errors.New(`you can only sort by either "key" or "value"`)
		}
		reverse := a.boolean(2, "reverse", false)
		out := make([]any, d.Len())
		for i, k := range d.keys {
			out[i] = &List{Items: []any{k, d.vals[i]}, Tuple: true}
		}
		var err error
		// Python's sorted(reverse=True) keeps equal items in their order,
		// so the reversal is in the comparison, not of the result.
		sort.SliceStable(out, func(i, j int) bool {
			x, y := out[i].(*List).Items[idx], out[j].(*List).Items[idx]
			if !caseSensitive {
				x, y = foldCase(x), foldCase(y)
			}
			c, e := r.compare(x, y)
			if e != nil {
				err = e
			}
			if reverse {
				return c > 0
			}
			return c < 0
		})
		return &List{Items: out}, err
	case "e", "escape", "forceescape":
		if r.dynamo {
			return mjHTMLEscape.Replace(r.str(v)), nil
		}
		return htmlEscape(r.str(v)), nil
	case "format":
		// As jinja2: value % (kwargs or args).
		if a.kw != nil && a.kw.Len() > 0 {
			if len(a.pos) > 0 {
				return nil, errors.New("can't handle positional and keyword arguments at the same time")
			}
			return r.percentFormat(toStr(v), a.kw)
		}
		return r.percentFormat(toStr(v), &List{Items: a.pos, Tuple: true})
	case "attr":
		n, err := a.str(0, "name", "")
		if err != nil {
			return nil, err
		}
		if r.dynamo {
			// minijinja's attr is its [] operator.
			return mjItem(v, n)
		}
		// The attr filter is Python's getattr alone: a dict's keys are
		// not attributes.
		if d, ok := v.(*Dict); ok && !isMethod(d, n) {
			return undefined{owner: "dict", attr: n}, nil
		}
		return getAttr(v, n)
	case "wordcount":
		return int64(len(strings.FieldsFunc(r.str(v), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' }))), nil
	case "batch":
		return r.batch(v, a)
	case "slice":
		return r.sliceFilter(v, a)
	case "center":
		width, err := a.integer(0, "width", 80)
		if err != nil {
			return nil, err
		}
		return r.center(r.str(v), width, " ")
	case "groupby":
		return r.groupBy(v, a)
	case "truncate":
		return truncateFilter(v, a)
	case "filesizeformat":
		return fileSizeFormat(v, a.boolean(0, "binary", false))
	case "striptags":
		return r.stripTags(r.str(v))
	case "xmlattr":
		return xmlAttr(v, a.boolean(0, "autospace", true))
	case "urlencode":
		return urlEncode(v)
	case "pprint":
		// pprint's text is its repr's plus, per item, a line break and an
		// indent as deep as the item, and it builds the repr of every
		// level it breaks: measured and paid for as such.
		m := textMeasure{pretty: true}
		m.walk(v, r.maxOutput, 0)
		if m.bytes > r.maxOutput {
			return nil, r.overflow()
		}
		if err := r.step(int64(m.items)*8 + int64(m.bytes>>3) + 1); err != nil {
			return nil, err
		}
		return pformat(v), nil
	case "wordwrap", "urlize", "random":
		return nil, fmt.Errorf("filter '%s' is not supported", name)
	case "split":
		if r.dynamo {
			// minijinja's split filter is Python's str.split of a string
			// (anything else is an error): at white space without a
			// separator, a negative maxsplits for no limit. It gives a
			// lazy sequence, a list here.
			s, ok := v.(string)
			if !ok {
				return nil, errors.New("value is not a string")
			}
			sep, _ := a.get(0, "split")
			maxs, _ := a.get(1, "maxsplits")
			return r.strMethod(s, "split", argList{pos: []any{sep, maxs}})
		}
	case "bool":
		if r.dynamo {
			// minijinja's bool filter: the value's truth.
			return truthy(v), nil
		}
	case "lines":
		if r.dynamo {
			// As split, minijinja's lines takes a string only (anything
			// else, undefined included, is an error).
			s, ok := v.(string)
			if !ok {
				return nil, errors.New("value is not a string")
			}
			return r.lines(s)
		}
	case "chain":
		if r.dynamo {
			return r.chain(append([]any{v}, a.pos...))
		}
	case "zip":
		if r.dynamo {
			return r.zip(append([]any{v}, a.pos...))
		}
	}
	return nil, fmt.Errorf("no filter named '%s'", name)
}

// lines is minijinja's lines filter, Rust's str::lines: the text cut at
// each \n, a \r before it dropped, and no empty line after a final \n.
func (r *renderer) lines(s string) (any, error) {
	out := &List{}
	for s != "" {
		line, rest, cut := strings.Cut(s, "\n")
		if cut {
			line = strings.TrimSuffix(line, "\r")
		}
		if err := r.step(1); err != nil {
			return nil, err
		}
		out.Items = append(out.Items, line)
		s = rest
	}
	return out, nil
}

// chain is minijinja's chain filter: sequences give one sequence, maps a
// map in which a key's value is that of the last map holding it, and
// anything else the items of each value in turn. (minijinja keeps the maps
// apart behind one view, so iterating one with a key repeated yields that
// key twice; here it comes once, where its first map put it.)
func (r *renderer) chain(vs []any) (any, error) {
	dicts, n := true, 0
	for _, v := range vs {
		d, ok := v.(*Dict)
		if !ok {
			dicts = false
			break
		}
		n += d.Len()
	}
	if dicts {
		if err := r.step(int64(n) + 1); err != nil {
			return nil, err
		}
		out := NewDict()
		for _, v := range vs {
			d := v.(*Dict)
			for _, k := range d.keys {
				val, _ := d.Get(k)
				out.Set(k, val)
			}
		}
		return out, nil
	}
	out := &List{}
	for _, v := range vs {
		items, err := seqItems(v)
		if err != nil {
			return nil, err
		}
		if err := r.step(int64(len(items)) + 1); err != nil {
			return nil, err
		}
		out.Items = append(out.Items, items...)
	}
	return out, nil
}

// zip is minijinja's zip filter, Python's zip: tuples of the values' items
// in step, as many as the shortest has.
func (r *renderer) zip(vs []any) (any, error) {
	cols := make([][]any, len(vs))
	n := -1
	for i, v := range vs {
		items, err := seqItems(v)
		if err != nil {
			return nil, err
		}
		cols[i] = items
		if n < 0 || len(items) < n {
			n = len(items)
		}
	}
	if err := r.step(int64(n)*int64(len(vs)) + 1); err != nil {
		return nil, err
	}
	out := &List{Items: make([]any, n)}
	for j := range n {
		t := &List{Tuple: true, Items: make([]any, len(vs))}
		for i := range vs {
			t.Items[i] = cols[i][j]
		}
		out.Items[j] = t
	}
	return out, nil
}

// batch is jinja2's batch filter: lists of linecount items, the last one
// padded with fill_with when it is given and not None.
func (r *renderer) batch(v any, a argList) (any, error) {
	items, err := seqItems(v)
	if err != nil {
		return nil, err
	}
	n, err := a.integer(0, "linecount", 0)
	if err != nil {
		return nil, err
	}
	if _, ok := a.get(0, "linecount"); !ok {
		return nil, errors.New("batch() missing required argument: 'linecount'")
	}
	fill, hasFill := a.get(1, "fill_with")
	if err := r.step(int64(len(items))); err != nil {
		return nil, err
	}
	out := []any{}
	var cur []any
	for _, it := range items {
		if int64(len(cur)) == n {
			out = append(out, &List{Items: cur})
			cur = nil
		}
		cur = append(cur, it)
	}
	if len(cur) > 0 {
		if hasFill && fill != nil && int64(len(cur)) < n {
			if n > int64(r.maxOutput) {
				return nil, r.chargeItems(r.maxOutput + 1)
			}
			if err := r.chargeItems(int(n)); err != nil {
				return nil, err
			}
			for int64(len(cur)) < n {
				cur = append(cur, fill)
			}
		}
		out = append(out, &List{Items: cur})
	}
	return &List{Items: out}, nil
}

// sliceFilter is jinja2's slice filter: the items in slices columns, the
// first ones one longer, the others padded with fill_with when it is given
// and not None.
func (r *renderer) sliceFilter(v any, a argList) (any, error) {
	items, err := seqItems(v)
	if err != nil {
		return nil, err
	}
	if _, ok := a.get(0, "slices"); !ok {
		return nil, errors.New("slice() missing required argument: 'slices'")
	}
	slices, err := a.integer(0, "slices", 0)
	if err != nil {
		return nil, err
	}
	if slices <= 0 {
		if slices == 0 {
			return nil, errors.New("integer division or modulo by zero")
		}
		return &List{Items: []any{}}, nil
	}
	if slices > int64(r.maxOutput) {
		return nil, r.chargeItems(r.maxOutput + 1)
	}
	fill, hasFill := a.get(1, "fill_with")
	if err := r.chargeItems(len(items) + int(slices)); err != nil {
		return nil, err
	}
	length := int64(len(items))
	per, extra := length/slices, length%slices
	offset := int64(0)
	out := make([]any, 0, slices)
	for i := int64(0); i < slices; i++ {
		start := offset + i*per
		if i < extra {
			offset++
		}
		end := offset + (i+1)*per
		col := append([]any{}, items[start:end]...)
		if hasFill && fill != nil && i >= extra {
			col = append(col, fill)
		}
		out = append(out, &List{Items: col})
	}
	return &List{Items: out}, nil
}

// zfill is Python's str.zfill: s padded on the left with zeros to width
// runes, after its sign if it has one.
func (r *renderer) zfill(s string, width int64) (any, error) {
	n := int64(utf8.RuneCountInString(s))
	if width <= n {
		return s, nil
	}
	if width > int64(r.maxOutput) {
		return nil, r.overflow()
	}
	if err := r.chargeBytes(int(width-n) + len(s)); err != nil {
		return nil, err
	}
	zeros := strings.Repeat("0", int(width-n))
	if s != "" && (s[0] == '+' || s[0] == '-') {
		return s[:1] + zeros + s[1:], nil
	}
	return zeros + s, nil
}

// expandTabs is Python's str.expandtabs: each tab becomes the spaces to
// the next multiple of size columns (none when size is not positive),
// counting columns from the last line break (\n or \r).
func (r *renderer) expandTabs(s string, size int64) (any, error) {
	if !strings.Contains(s, "\t") {
		return s, nil
	}
	var b strings.Builder
	col := int64(0)
	for _, c := range s {
		switch c {
		case '\t':
			if size <= 0 {
				continue
			}
			n := size - col%size
			if int64(b.Len())+n > int64(r.maxOutput) {
				return nil, r.overflow()
			}
			if err := r.chargeBytes(int(n)); err != nil {
				return nil, err
			}
			b.WriteString(strings.Repeat(" ", int(n)))
			col += n
			continue
		case '\n', '\r':
			col = 0
		default:
			col++
		}
		b.WriteRune(c)
	}
	return b.String(), nil
}

// justify is Python's str.center, ljust and rjust: s padded with fill to
// width runes; center splits the padding as CPython does (the extra rune
// goes left when both the padding and width are odd).
func (r *renderer) justify(s, name string, width int64, fill string) (any, error) {
	n := int64(utf8.RuneCountInString(s))
	if width <= n {
		return s, nil
	}
	if width > int64(r.maxOutput) {
		return nil, r.overflow()
	}
	if err := r.chargeBytes(int(width-n)*len(fill) + len(s)); err != nil {
		return nil, err
	}
	pad := width - n
	switch name {
	case "ljust":
		return s + strings.Repeat(fill, int(pad)), nil
	case "rjust":
		return strings.Repeat(fill, int(pad)) + s, nil
	}
	left := pad/2 + (pad & width & 1)
	return strings.Repeat(fill, int(left)) + s + strings.Repeat(fill, int(pad-left)), nil
}

// center is Python's str.center (justify).
func (r *renderer) center(s string, width int64, fill string) (any, error) {
	return r.justify(s, "center", width, fill)
}

// foldCase is Jinja's ignore_case: str.lower of a string.
func foldCase(v any) any {
	if s, ok := v.(string); ok {
		return pyLower(s)
	}
	return v
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}

// toJSON is transformers' tojson filter, json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False): positional arguments
// follow that order.
func (r *renderer) toJSON(v any, a argList) (any, error) {
	if r.dynamo {
		return r.minijinjaToJSON(v, a)
	}
	var b strings.Builder
	iv, hasIndent := a.get(1, "indent")
	indent := ""
	if hasIndent && iv != nil {
		switch x := iv.(type) {
		case int64, bool:
			n, _ := intOf(x)
			// An indent longer than the output limit overflows at the
			// first newline; a scalar never writes one.
			n = min(n, int64(r.maxOutput)+1)
			indent = strings.Repeat(" ", max(int(n), 0))
		case string:
			indent = x
		default:
			return nil, errors.New("tojson: indent must be an int or a string")
		}
	} else {
		hasIndent = false
	}
	itemSep, keySep := ", ", ": "
	if hasIndent {
		itemSep = ","
	}
	if sv, ok := a.get(2, "separators"); ok && sv != nil {
		l, ok := sv.(*List)
		if !ok || len(l.Items) != 2 {
			return nil, errors.New("tojson: separators must be a pair")
		}
		itemSep, keySep = toStr(l.Items[0]), toStr(l.Items[1])
	}
	sortKeys := a.boolean(3, "sort_keys", false)
	if err := writeJSON(&b, v, indent, hasIndent, itemSep, keySep, sortKeys, 0, r); err != nil {
		return nil, err
	}
	out := b.String()
	if a.boolean(0, "ensure_ascii", false) {
		out = asciiEscape(out)
	}
	if err := r.chargeBytes(len(out)); err != nil {
		return nil, err
	}
	return out, nil
}

// minijinjaToJSON is minijinja's tojson (WithDynamoFrontend): only the
// keyword indent is read, and only what minijinja converts to a size is
// an indent.
func (r *renderer) minijinjaToJSON(v any, a argList) (any, error) {
	if len(a.pos) > 0 {
		return nil, errors.New("tojson: received unexpected extra arguments")
	}
	indent, hasIndent := "", false
	if iv, ok := a.kw.Get("indent"); ok {
		// minijinja's usize conversion: a non-negative integer, a bool
		// (0 or 1) or a float without a fraction.
		n := int64(-1)
		switch x := iv.(type) {
		case int64:
			n = x
		case bool:
			n = 0
			if x {
				n = 1
			}
		case float64:
			if x == math.Trunc(x) && x >= 0 && x < 1<<53 {
				n = int64(x)
			}
		}
		if n >= 0 {
			// An indent longer than the output limit overflows at the
			// first newline; a scalar never writes one.
			indent, hasIndent = strings.Repeat(" ", int(min(n, int64(r.maxOutput)+1))), true
		}
	}
	itemSep, keySep := ",", ":"
	if hasIndent {
		keySep = ": "
	}
	var b strings.Builder
	if err := writeJSON(&b, v, indent, hasIndent, itemSep, keySep, false, 0, r); err != nil {
		return nil, err
	}
	out := htmlSafeJSON(b.String())
	if err := r.chargeBytes(len(out)); err != nil {
		return nil, err
	}
	return out, nil
}

// htmlSafeJSON escapes the characters minijinja's tojson escapes so that
// its output is safe in HTML as well as in JSON.
var htmlSafeJSON = strings.NewReplacer("<", `\u003c`, ">", `\u003e`, "&", `\u0026`, "'", `\u0027`).Replace

func (r *renderer) join(v any, a argList) (any, error) {
	items, err := seqItems(v)
	if err != nil {
		return nil, err
	}
	// Jinja joins with str(d): any separator is printed.
	sep := ""
	if d, ok := a.get(0, "d"); ok {
		sep = r.str(d)
	}
	attr := ""
	if x, ok := a.get(1, "attribute"); ok && x != nil {
		attr = toStr(x)
	}
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteString(sep)
		}
		if attr != "" {
			if it, err = attrPath(it, attr); err != nil {
				return nil, err
			}
		}
		b.WriteString(r.str(it))
		if err := r.chargeBytes(b.Len()); err != nil {
			return nil, err
		}
	}
	return b.String(), nil
}

func toInt(v any, a argList) (any, error) {
	// The default comes back as it was given, whatever its type (jinja
	// returns it untouched when the conversion fails).
	var def any = int64(0)
	if d, ok := a.get(0, "default"); ok {
		def = d
	}
	base, err := a.integer(1, "base", 10)
	if err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case int64:
		return x, nil
	case bool:
		i, _ := intOf(x)
		return i, nil
	case float64:
		return floatToInt(x, def)
	case string:
		// Jinja tries int(value, base), then int(float(value)), then the
		// default.
		if i, ok, err := pyParseInt(x, base); ok || err != nil {
			return i, err
		}
		if f, ok := pyParseFloat(x); ok {
			if math.IsInf(f, 0) {
				// This second try catches OverflowError too.
				return def, nil
			}
			return floatToInt(f, def)
		}
	}
	return def, nil
}

// floatToInt is Python's int(float): NaN is a ValueError (the int filter's
// default), an infinity an OverflowError, which the filter does not catch
// for a float value.
func floatToInt(f float64, def any) (any, error) {
	switch {
	case math.IsNaN(f):
		return def, nil
	case math.IsInf(f, 0):
		return nil, errors.New("cannot convert float infinity to integer")
	case math.Abs(f) >= 1<<63:
		return nil, errors.New("integer overflow: integers are 64-bit here")
	}
	return int64(f), nil
}

// pyParseInt is Python's int(s, base) for the ASCII digits: surrounding
// whitespace, a sign, a 0x, 0o or 0b prefix matching the base (base 0 takes
// the base from the prefix, and then a decimal number has no leading zero),
// and single underscores between digits. ok is false where Python raises
// ValueError (a bad literal or a base outside 0 and 2..36); err is set for
// a value past 64 bits.
func pyParseInt(s string, base int64) (n int64, ok bool, err error) {
	if base != 0 && (base < 2 || base > 36) {
		return 0, false, nil
	}
	s = strings.TrimFunc(s, pyIsSpace)
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	prefixed := false
	if len(s) >= 2 && s[0] == '0' {
		var pb int64
		switch s[1] {
		case 'x', 'X':
			pb = 16
		case 'o', 'O':
			pb = 8
		case 'b', 'B':
			pb = 2
		}
		if pb != 0 && (base == 0 || base == pb) {
			base, prefixed, s = pb, true, s[2:]
		}
	}
	if base == 0 {
		base = 10
		if strings.Trim(s, "0_") != "" && strings.HasPrefix(s, "0") {
			return 0, false, nil
		}
	}
	// An underscore may follow the prefix or a digit, and must precede a
	// digit.
	digits := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' {
			if i+1 >= len(s) || s[i+1] == '_' || i == 0 && !prefixed {
				return 0, false, nil
			}
			continue
		}
		digits = append(digits, c)
	}
	if len(digits) == 0 {
		return 0, false, nil
	}
	u, perr := strconv.ParseUint(string(digits), int(base), 64)
	if perr != nil {
		if errors.Is(perr, strconv.ErrRange) {
			return 0, false, errors.New("integer overflow: integers are 64-bit here")
		}
		return 0, false, nil
	}
	if neg {
		if u > 1<<63 {
			return 0, false, errors.New("integer overflow: integers are 64-bit here")
		}
		return -int64(u), true, nil
	}
	if u > math.MaxInt64 {
		return 0, false, errors.New("integer overflow: integers are 64-bit here")
	}
	return int64(u), true, nil
}

// pyParseFloat is Python's float(s) for a string: surrounding whitespace, a
// decimal literal with single underscores between digits, or inf, infinity
// and nan in any case, signed. Go's hexadecimal floats are not Python's.
func pyParseFloat(s string) (float64, bool) {
	s = strings.TrimFunc(s, pyIsSpace)
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 || body == "" {
		return 0, false
	}
	switch strings.ToLower(body) {
	case "nan":
		// A sign is allowed and means nothing.
		return math.NaN(), true
	case "inf", "infinity":
		f, err := strconv.ParseFloat(s, 64)
		return f, err == nil
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c >= '0' && c <= '9', c == '.', c == 'e', c == 'E', c == '+', c == '-':
		case c == '_':
			if i == 0 || i+1 >= len(body) || !isASCIIDigit(body[i-1]) || !isASCIIDigit(body[i+1]) {
				return 0, false
			}
		default:
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, true
}

func isASCIIDigit(c byte) bool { return c >= '0' && c <= '9' }

func isASCIIDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// attrPath resolves "a.b.0" as Jinja's make_attrgetter does.
func attrPath(v any, path string) (any, error) {
	for _, part := range strings.Split(path, ".") {
		var key any = part
		if isASCIIDigits(part) {
			if i, err := strconv.ParseInt(part, 10, 64); err == nil {
				key = i
			}
		}
		var err error
		if v, err = getItem(v, key); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (r *renderer) mapFilter(v any, a argList) (any, error) {
	_, undef := v.(undefined)
	if !truthy(v) && (!r.dynamo || v == nil || undef) {
		// Jinja only iterates a true value; minijinja iterates any value
		// (none and undefined as empty), so false or 0 is an error there.
		return &List{Items: []any{}}, nil
	}
	items, err := seqItems(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, len(items))
	if attr, ok := a.kw.Get("attribute"); ok {
		path := toStr(attr)
		def, hasDef := a.kw.Get("default")
		for _, it := range items {
			x, err := attrPath(it, path)
			if err != nil {
				return nil, err
			}
			if _, isU := x.(undefined); isU && hasDef {
				x = def
			}
			out = append(out, x)
		}
		return &List{Items: out}, nil
	}
	if len(a.pos) == 0 {
		return nil, errors.New("map requires a filter argument")
	}
	fname, ok := a.pos[0].(string)
	if !ok {
		return nil, errors.New("map: filter name must be a string")
	}
	rest := argList{pos: a.pos[1:], kw: a.kw}
	for _, it := range items {
		if err := r.step(1); err != nil {
			return nil, err
		}
		x, err := r.filter(fname, it, rest)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return &List{Items: out}, nil
}

func (r *renderer) selectFilter(v any, a argList, want, byAttr bool) (any, error) {
	_, undef := v.(undefined)
	if !truthy(v) && (!r.dynamo || v == nil || undef) {
		// As in mapFilter: only Jinja takes any false value as empty.
		return &List{Items: []any{}}, nil
	}
	items, err := seqItems(v)
	if err != nil {
		return nil, err
	}
	pos := a.pos
	attr := ""
	if byAttr {
		if len(pos) == 0 {
			return nil, errors.New("selectattr needs an attribute")
		}
		attr = toStr(pos[0])
		pos = pos[1:]
	}
	test := ""
	var targs []any
	if len(pos) > 0 {
		test = toStr(pos[0])
		targs = pos[1:]
	}
	out := []any{}
	for _, it := range items {
		if err := r.step(1); err != nil {
			return nil, err
		}
		x := it
		if byAttr {
			if x, err = attrPath(it, attr); err != nil {
				return nil, err
			}
		}
		ok := truthy(x)
		if test != "" {
			if ok, err = r.applyTest(test, x, targs); err != nil {
				return nil, err
			}
		}
		if ok == want {
			out = append(out, it)
		}
	}
	return &List{Items: out}, nil
}

// groupBy is Jinja's groupby filter: the items sorted by the attribute
// (ignoring case unless case_sensitive; a missing one is default when
// given), then one (grouper, list) tuple per run of equal keys. The grouper
// is the first item's attribute as it is, not case-folded.
func (r *renderer) groupBy(v any, a argList) (any, error) {
	items, err := seqItems(v)
	if err != nil {
		return nil, err
	}
	attr, ok := a.get(0, "attribute")
	if !ok {
		return nil, errors.New("groupby() missing 1 required positional argument: 'attribute'")
	}
	def, hasDef := a.get(1, "default")
	cs := a.boolean(2, "case_sensitive", false)
	keyOf := func(x any) (any, error) {
		var k any
		var err error
		if i, isInt := attr.(int64); isInt {
			k, err = getItem(x, i)
		} else {
			k, err = attrPath(x, toStr(attr))
		}
		if _, missing := k.(undefined); missing && hasDef {
			k = def
		}
		return k, err
	}
	if err := r.step(int64(len(items)) * 8); err != nil {
		return nil, err
	}
	keys := make([]any, len(items))
	folded := make([]any, len(items))
	for i, it := range items {
		if keys[i], err = keyOf(it); err != nil {
			return nil, err
		}
		folded[i] = keys[i]
		if !cs {
			folded[i] = foldCase(keys[i])
		}
	}
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	var cerr error
	sort.SliceStable(order, func(i, j int) bool {
		ki, kj := folded[order[i]], folded[order[j]]
		if equal(ki, kj) {
			return false
		}
		c, e := r.compare(ki, kj)
		if e != nil && cerr == nil {
			cerr = e
		}
		return c < 0
	})
	if cerr != nil {
		return nil, cerr
	}
	var out []any
	for start := 0; start < len(order); {
		end := start + 1
		for end < len(order) && equal(folded[order[end]], folded[order[start]]) {
			end++
		}
		group := make([]any, 0, end-start)
		for _, i := range order[start:end] {
			group = append(group, items[i])
		}
		out = append(out, &List{Items: []any{keys[order[start]], &List{Items: group}}, Tuple: true, group: true})
		start = end
	}
	return &List{Items: orEmptyAny(out)}, nil
}

func (r *renderer) sortFilter(v any, a argList) (any, error) {
	items, err := seqItems(v)
	if err != nil {
		return nil, err
	}
	rev := a.boolean(0, "reverse", false)
	cs := a.boolean(1, "case_sensitive", false)
	// As Jinja's make_multi_attrgetter: a string attribute is a
	// comma-separated list of paths, each giving one part of the key.
	var paths []string
	if attr, ok := a.get(2, "attribute"); ok && attr != nil {
		if s, isStr := attr.(string); isStr {
			paths = strings.Split(s, ",")
		} else {
			paths = []string{toStr(attr)}
		}
	}
	out := append([]any{}, items...)
	keys := make(map[int][]any, len(out))
	order := make([]int, len(out))
	for i, x := range out {
		order[i] = i
		k := []any{x}
		if len(paths) > 0 {
			k = make([]any, len(paths))
			for p, path := range paths {
				if k[p], err = attrPath(x, path); err != nil {
					return nil, err
				}
			}
		}
		if !cs {
			for p := range k {
				k[p] = foldCase(k[p])
			}
		}
		keys[i] = k
	}
	if err := r.step(int64(len(out)) * 8); err != nil {
		return nil, err
	}
	var cerr error
	// The keys are lists, compared as Python compares lists: equal parts
	// are skipped with ==, so equal keys never need an ordering.
	sort.SliceStable(order, func(i, j int) bool {
		ki, kj := keys[order[i]], keys[order[j]]
		c := 0
		for p := range ki {
			if equal(ki[p], kj[p]) {
				continue
			}
			var e error
			if c, e = r.compare(ki[p], kj[p]); e != nil && cerr == nil {
				cerr = e
			}
			break
		}
		if rev {
			return c > 0
		}
		return c < 0
	})
	if cerr != nil {
		return nil, cerr
	}
	sorted := make([]any, len(order))
	for i, o := range order {
		sorted[i] = out[o]
	}
	return &List{Items: sorted}, nil
}

func (r *renderer) indent(v any, a argList) (any, error) {
	s, ok := v.(string)
	if !ok && r.dynamo {
		// minijinja indents the text of any value (5|indent(2) is "5").
		s, ok = r.str(v), true
	}
	if !ok {
		if u, isU := v.(undefined); isU {
			return nil, errUndefined(u)
		}
		return nil, fmt.Errorf("unsupported operand type(s) for +=: '%s' and 'str'", typeName(v))
	}
	width := "    "
	if w, ok := a.get(0, "width"); ok {
		switch x := w.(type) {
		case int64:
			if x > 256 {
				x = 256
			}
			width = strings.Repeat(" ", max(int(x), 0))
		case string:
			width = x
		}
	}
	first := a.boolean(1, "first", false)
	blank := a.boolean(2, "blank", false)
	if r.dynamo {
		return r.mjIndent(s, width, first, blank)
	}
	nl := "\n"
	s += nl
	lines := strings.Split(s, "\n")
	lines = lines[:len(lines)-1]
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			b.WriteString(nl)
		}
		if i == 0 && !first {
			b.WriteString(l)
			continue
		}
		if blank || pyRStrip(l) != "" {
			b.WriteString(width)
		}
		b.WriteString(l)
		if err := r.chargeBytes(b.Len()); err != nil {
			return nil, err
		}
	}
	return b.String(), nil
}

// mjIndent is minijinja's indent: one trailing "\n" (then "\r") taken off,
// lines split at "\n" alone, every line after the first indented (the
// first too with first) unless it is empty (blank indents those too), and
// one trailing "\n" (then "\r") taken off what that gives.
func (r *renderer) mjIndent(s, width string, first, blank bool) (any, error) {
	trim := func(s string) string {
		s = strings.TrimSuffix(s, "\n")
		return strings.TrimSuffix(s, "\r")
	}
	var b strings.Builder
	for i, l := range strings.Split(trim(s), "\n") {
		if l != "" && (i > 0 || first) || l == "" && blank && (i > 0 || first) {
			b.WriteString(width)
		}
		b.WriteString(l)
		b.WriteByte('\n')
		if err := r.chargeBytes(b.Len()); err != nil {
			return nil, err
		}
	}
	return trim(b.String()), nil
}

// jinjaTitle is Jinja's title filter: each piece after a run of whitespace,
// '-', '(', '{', '[' or '<' gets its first character upper-cased and the rest
// lower-cased (str.upper and str.lower of those slices).
func jinjaTitle(s string) string {
	var b strings.Builder
	isSep := func(c rune) bool { return pyIsSpace(c) || strings.ContainsRune("-({[<", c) }
	for s != "" {
		if i := strings.IndexFunc(s, func(c rune) bool { return !isSep(c) }); i != 0 {
			if i < 0 {
				i = len(s)
			}
			b.WriteString(s[:i])
			s = s[i:]
			continue
		}
		end := strings.IndexFunc(s, isSep)
		if end < 0 {
			end = len(s)
		}
		_, n := utf8.DecodeRuneInString(s)
		b.WriteString(pyUpper(s[:n]))
		b.WriteString(pyLower(s[n:end]))
		s = s[end:]
	}
	return b.String()
}

func (r *renderer) replace(s, old, nw string, cnt int64) (any, error) {
	if cnt < 0 {
		cnt = -1
	}
	n := strings.Count(s, old)
	if old == "" {
		n = utf8.RuneCountInString(s) + 1
	}
	if cnt >= 0 && int64(n) > cnt {
		n = int(cnt)
	}
	if int64(len(s))+int64(n)*int64(len(nw)) > int64(r.maxOutput) {
		return nil, r.overflow()
	}
	out := strings.Replace(s, old, nw, int(cnt))
	return out, r.chargeBytes(len(out))
}

// pyStrip is str.strip/lstrip/rstrip with optional characters.
func pyStrip(s, chars string, hasChars, left, right bool) string {
	in := pyIsSpace
	if hasChars {
		in = func(r rune) bool { return strings.ContainsRune(chars, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, in)
	}
	if right {
		s = strings.TrimRightFunc(s, in)
	}
	return s
}

// mjBoolKey is a bool's key in the Dynamo mode's unique, apart from the
// numbers' keys (hashKey makes True and 1 the same key, as Python does).
type mjBoolKey bool

// Tests.

func (r *renderer) applyTest(name string, v any, args []any) (bool, error) {
	arg := func() (any, error) {
		if len(args) == 0 {
			return nil, fmt.Errorf("test '%s' needs an argument", name)
		}
		return args[0], nil
	}
	if r.dynamo && !mjTests[name] {
		// minijinja looks a test up when it performs it.
		return false, fmt.Errorf("no test named '%s'", name)
	}
	if max, fixed := mjTestArgs[name]; fixed && r.dynamo && len(args) > max {
		return false, errors.New("too many arguments")
	}
	switch name {
	case "defined":
		_, u := v.(undefined)
		return !u, nil
	case "undefined":
		_, u := v.(undefined)
		return u, nil
	case "none":
		return v == nil, nil
	case "string":
		_, ok := v.(string)
		return ok, nil
	case "mapping":
		_, ok := v.(*Dict)
		return ok, nil
	case "iterable":
		switch v.(type) {
		case string, *List, *Dict, undefined:
			return true, nil
		case nil:
			return r.dynamo, nil // minijinja iterates none
		}
		return false, nil
	case "sequence":
		if r.dynamo {
			// minijinja: lists only (Python: anything with len and
			// indexing, strings and dicts too).
			_, ok := v.(*List)
			return ok, nil
		}
		switch v.(type) {
		case string, *List, *Dict, undefined:
			return true, nil
		}
		return false, nil
	case "number":
		switch v.(type) {
		case int64, float64, bigInt:
			return true, nil
		case bool:
			return !r.dynamo, nil // a bool is a number in Python, not in minijinja
		}
		return false, nil
	case "integer", "int": // int: minijinja's alias (the name check keeps it from Jinja templates)
		switch v.(type) {
		case int64, bigInt:
			return true, nil
		}
		return false, nil
	case "float":
		_, ok := v.(float64)
		return ok, nil
	case "boolean":
		_, ok := v.(bool)
		return ok, nil
	case "true":
		b, ok := v.(bool)
		return ok && b, nil
	case "false":
		b, ok := v.(bool)
		return ok && !b, nil
	case "callable":
		switch v.(type) {
		case *macro, *builtin, *boundMethod, undefined:
			return true, nil
		}
		return false, nil
	case "odd", "even", "divisibleby":
		var div any = int64(2)
		if name == "divisibleby" {
			a, err := arg()
			if err != nil {
				return false, err
			}
			div = a
		}
		if r.dynamo {
			// minijinja's odd, even and divisibleby are false of anything
			// that is no number (a bool is one here: true is odd) and
			// when the remainder fails (a divisor of 0), never an error.
			switch v.(type) {
			case bool, int64, float64, bigInt:
			default:
				return false, nil
			}
		}
		if _, isStr := v.(string); isStr {
			return false, fmt.Errorf("test '%s' needs a number, not str", name)
		}
		m, err := r.binop("%", v, div)
		if err != nil {
			if r.dynamo && !errors.Is(err, ErrRenderUnavailable) {
				return false, nil
			}
			return false, err
		}
		if name == "odd" {
			return equal(m, int64(1)), nil
		}
		return equal(m, int64(0)), nil
	case "lower", "upper":
		s, ok := v.(string)
		if r.dynamo {
			// minijinja's lower and upper tests take a string only, and
			// are its islower and isupper: every character of that case.
			if !ok {
				return false, errors.New("value is not a string")
			}
			b, err := r.strMethod(s, "is"+name, argList{})
			return b == true, err
		}
		if !ok {
			s = toStr(v)
		}
		if name == "lower" {
			return isLower(s), nil
		}
		return isUpper(s), nil
	case "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "in", "sameas":
		a, err := arg()
		if err != nil {
			return false, err
		}
		switch name {
		case "eq", "equalto", "==":
			return equal(v, a), nil
		case "ne", "!=":
			return !equal(v, a), nil
		case "in":
			return r.contains(a, v)
		case "sameas":
			if isHashable(v) {
				return equal(v, a) && typeName(v) == typeName(a), nil
			}
			return v == a, nil
		}
		op := map[string]string{"lt": "<", "lessthan": "<", "<": "<", "le": "<=", "<=": "<=", "gt": ">", "greaterthan": ">", ">": ">", "ge": ">=", ">=": ">="}[name]
		return r.cmpop(op, v, a)
	case "filter", "test":
		// Whether the name is one of the environment's filters or tests,
		// as Jinja's environment has them, whether this engine implements
		// the filter or not.
		if !isHashable(v) {
			return false, fmt.Errorf("unhashable type: '%s'", typeName(v))
		}
		s, ok := v.(string)
		if !ok {
			return false, nil
		}
		switch {
		case r.dynamo && name == "filter":
			return mjFilters[s], nil
		case r.dynamo:
			return mjTests[s], nil
		case name == "filter":
			return slices.Contains(jinjaFilterNames, s), nil
		}
		return slices.Contains(jinjaTestNames, s), nil
	case "escaped":
		// Strings here are never Markup.
		return false, nil
	case "safe":
		if r.dynamo {
			return false, nil // minijinja's alias of escaped
		}
	case "startingwith", "endingwith":
		if r.dynamo {
			// minijinja's tests of a string's prefix or suffix: false
			// when the value or the argument is no string.
			a, err := arg()
			if err != nil {
				return false, err
			}
			s, ok1 := v.(string)
			t, ok2 := a.(string)
			if !ok1 || !ok2 {
				return false, nil
			}
			if name == "startingwith" {
				return strings.HasPrefix(s, t), nil
			}
			return strings.HasSuffix(s, t), nil
		}
	}
	return false, fmt.Errorf("no test named '%s'", name)
}

// jinjaFilterNames are the filters of the environment transformers renders
// with: Jinja's built-in ones (tojson replaced by transformers' own).
var jinjaFilterNames = []string{
	"abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
	"escape", "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent",
	"int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "pprint",
	"random", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
	"selectattr", "slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim",
	"truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr",
}

// mjFilters and mjTests are the filters and tests of the environment
// Dynamo's frontend renders with: minijinja's built-in ones (2.24, with
// its default features, json and urlencode among them; the contrib
// crate's filters are not added, only its Python methods), tojson and
// length being the frontend's own.
var (
	mjFilters = nameSet("abs", "attr", "batch", "bool", "capitalize", "chain", "count", "d", "default",
		"dictsort", "e", "escape", "first", "float", "format", "groupby", "indent", "int", "items", "join",
		"last", "length", "lines", "list", "lower", "map", "max", "min", "pprint", "reject", "rejectattr",
		"replace", "reverse", "round", "safe", "select", "selectattr", "slice", "sort", "split", "string",
		"sum", "title", "tojson", "trim", "unique", "upper", "urlencode", "zip")
	mjTests = nameSet("!=", "<", "<=", "==", ">", ">=", "boolean", "defined", "divisibleby", "endingwith",
		"eq", "equalto", "escaped", "even", "false", "filter", "float", "ge", "greaterthan", "gt", "in", "int",
		"integer", "iterable", "le", "lessthan", "lower", "lt", "mapping", "ne", "none", "number", "odd",
		"safe", "sameas", "sequence", "startingwith", "string", "test", "true", "undefined", "upper")
)

// mjFilterArgs: how many positional arguments (after the value)
// minijinja's built-in filters take at most. Filters whose arguments
// minijinja reads by keyword (sort, map, tojson, ...) or which are the
// frontend's own (length) are not listed.
var mjFilterArgs = map[string]int{
	"abs": 0, "bool": 0, "capitalize": 0, "e": 0, "escape": 0, "first": 0, "items": 0,
	"last": 0, "lines": 0, "list": 0, "lower": 0, "pprint": 0, "reverse": 0, "safe": 0, "string": 0,
	"title": 0, "upper": 0,
	"attr": 1, "trim": 1,
	"batch": 2, "d": 2, "default": 2, "slice": 2, "split": 2,
	// Jinja2's number of parameters bounds these (minijinja takes fewer
	// or reads them by keyword).
	"join": 2, "max": 2, "min": 2, "sum": 2, "unique": 2, "replace": 3,
}

// mjTestArgs: how many arguments (after the value) minijinja's tests take.
var mjTestArgs = map[string]int{
	"boolean": 0, "defined": 0, "escaped": 0, "even": 0, "false": 0, "float": 0, "integer": 0,
	"iterable": 0, "lower": 0, "mapping": 0, "none": 0, "number": 0, "odd": 0, "safe": 0,
	"sequence": 0, "string": 0, "true": 0, "undefined": 0, "upper": 0,
	"!=": 1, "<": 1, "<=": 1, "==": 1, ">": 1, ">=": 1, "divisibleby": 1, "endingwith": 1,
	"eq": 1, "equalto": 1, "ge": 1, "greaterthan": 1, "gt": 1, "in": 1, "le": 1, "lessthan": 1,
	"lt": 1, "ne": 1, "sameas": 1, "startingwith": 1,
}

func nameSet(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// jinjaTestNames are Jinja's built-in tests.
var jinjaTestNames = []string{
	"!=", "<", "<=", "==", ">", ">=", "boolean", "callable", "defined", "divisibleby", "eq",
	"equalto", "escaped", "even", "false", "filter", "float", "ge", "greaterthan", "gt", "in",
	"integer", "iterable", "le", "lessthan", "lower", "lt", "mapping", "ne", "none", "number",
	"odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper",
}

// Methods of str, dict and list that templates call.

func isStrMethod(name string) bool {
	switch name {
	case "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit",
		"replace", "upper", "lower", "title", "capitalize", "find", "rfind",
		"index", "rindex", "count", "join", "splitlines", "isdigit", "isalpha", "isspace",
		"isalnum", "islower", "isupper", "isnumeric", "isdecimal", "isascii", "isidentifier",
		"isprintable", "format", "format_map", "expandtabs", "removeprefix", "removesuffix",
		"casefold", "swapcase", "zfill", "partition", "rpartition", "istitle", "center",
		"ljust", "rjust":
		return true
	}
	return false
}

func isDictMethod(name string) bool {
	switch name {
	case "get", "items", "keys", "values", "copy", "update", "pop", "setdefault", "clear", "popitem":
		return true
	}
	return false
}

func isListMethod(name string) bool {
	switch name {
	case "index", "count", "copy", "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse":
		return true
	}
	return false
}

// isSafeMethod reports whether the immutable sandbox lets a template use
// the method: list and dict methods that modify their object are unsafe.
func isSafeMethod(obj any, name string) bool {
	switch obj.(type) {
	case *Dict:
		switch name {
		case "update", "pop", "setdefault", "clear", "popitem":
			return false
		}
	case *List:
		switch name {
		case "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse":
			return false
		}
	}
	return true
}

func isMethod(obj any, name string) bool {
	switch obj.(type) {
	case string:
		return isStrMethod(name)
	case *Dict:
		return isDictMethod(name)
	case *List:
		return isListMethod(name)
	}
	return false
}

func (r *renderer) callMethod(obj any, name string, args []any, kw *Dict) (any, error) {
	a := argList{pos: args, kw: kw}
	switch x := obj.(type) {
	case string:
		return r.strMethod(x, name, a)
	case *Dict:
		switch name {
		case "get":
			k, _ := a.get(0, "key")
			def, _ := a.get(1, "default")
			if isHashable(k) {
				if v, ok := x.Get(k); ok {
					return v, nil
				}
			}
			return def, nil
		case "items":
			out := make([]any, x.Len())
			for i, k := range x.keys {
				out[i] = &List{Items: []any{k, x.vals[i]}, Tuple: true}
			}
			return &List{Items: out}, nil
		case "keys":
			return &List{Items: append([]any{}, x.keys...)}, nil
		case "values":
			return &List{Items: append([]any{}, x.vals...)}, nil
		case "copy":
			d := &Dict{}
			for i, k := range x.keys {
				d.Set(k, x.vals[i])
			}
			return d, nil
		}
	case *List:
		switch name {
		case "index", "count":
			it, _ := a.get(0, "value")
			n := int64(0)
			for i, e := range x.Items {
				if equal(e, it) {
					if name == "index" {
						return int64(i), nil
					}
					n++
				}
			}
			if name == "index" {
				return nil, errors.New("value is not in list")
			}
			return n, nil
		case "copy":
			return &List{Items: append([]any{}, x.Items...)}, nil
		}
	}
	return nil, fmt.Errorf("access to method '%s' of '%s' object is unsafe in the sandbox", name, typeName(obj))
}

func (r *renderer) strMethod(s, name string, a argList) (any, error) {
	if err := r.step(int64(len(s)>>6) + 1); err != nil {
		return nil, err
	}
	switch name {
	case "startswith", "endswith":
		p, _ := a.get(0, "prefix")
		var cands []any
		switch y := p.(type) {
		case string:
			cands = []any{y}
		case *List:
			if !y.Tuple {
				return nil, fmt.Errorf("%s first arg must be str or a tuple of str, not list", name)
			}
			cands = y.Items
		default:
			return nil, fmt.Errorf("%s first arg must be str or a tuple of str, not %s", name, typeName(p))
		}
		// start and end look at s[start:end]; an empty window matches
		// nothing, not even "".
		if len(a.pos) > 1 {
			win, _, ok, err := strWindow(s, a.pos[1:])
			if err != nil {
				return nil, err
			}
			if !ok {
				return false, nil
			}
			s = win
		}
		for _, c := range cands {
			cs, ok := c.(string)
			if !ok {
				return nil, fmt.Errorf("%s: tuple for must only contain str", name)
			}
			if name == "startswith" && strings.HasPrefix(s, cs) || name == "endswith" && strings.HasSuffix(s, cs) {
				return true, nil
			}
		}
		return false, nil
	case "strip", "lstrip", "rstrip":
		cv, has := a.get(0, "chars")
		chars := ""
		if has && cv != nil {
			cs, ok := cv.(string)
			if !ok {
				return nil, fmt.Errorf("%s arg must be None or str", name)
			}
			chars = cs
		} else {
			has = false
		}
		return pyStrip(s, chars, has, name != "rstrip", name != "lstrip"), nil
	case "split", "rsplit":
		sepv, _ := a.get(0, "sep")
		maxs, err := a.integer(1, "maxsplit", -1)
		if err != nil {
			return nil, err
		}
		var parts []string
		if sepv == nil {
			parts = splitWhitespace(s, int(maxs), name == "rsplit")
		} else {
			sep, ok := sepv.(string)
			if !ok {
				return nil, errors.New("must be str or None")
			}
			if sep == "" {
				return nil, errors.New("empty separator")
			}
			switch {
			case maxs < 0:
				parts = strings.Split(s, sep)
			case name == "split":
				parts = strings.SplitN(s, sep, int(maxs)+1)
			default:
				parts = rsplitN(s, sep, int(maxs))
			}
		}
		if err := r.step(int64(len(parts))); err != nil {
			return nil, err
		}
		out := make([]any, len(parts))
		for i, p := range parts {
			out[i] = p
		}
		return &List{Items: out}, nil
	case "replace":
		old, err := a.str(0, "old", "")
		if err != nil {
			return nil, err
		}
		nw, err := a.str(1, "new", "")
		if err != nil {
			return nil, err
		}
		cnt, err := a.integer(2, "count", -1)
		if err != nil {
			return nil, err
		}
		return r.replace(s, old, nw, cnt)
	case "upper":
		return pyUpper(s), nil
	case "lower":
		return pyLower(s), nil
	case "casefold":
		return pyCasefold(s), nil
	case "swapcase":
		return pySwapcase(s), nil
	case "title":
		if r.dynamo {
			return mjTitle(s), nil
		}
		return pyTitle(s), nil
	case "capitalize":
		return pyCapitalize(s), nil
	case "istitle":
		return isTitle(s), nil
	case "zfill":
		width, err := a.integer(0, "width", 0)
		if err != nil {
			return nil, err
		}
		return r.zfill(s, width)
	case "expandtabs":
		size, err := a.integer(0, "tabsize", 8)
		if err != nil {
			return nil, err
		}
		return r.expandTabs(s, size)
	case "format_map":
		m, ok := a.get(0, "mapping")
		d, isDict := m.(*Dict)
		if !ok || !isDict {
			return nil, fmt.Errorf("format_map() argument must be a mapping, not %s", typeName(m))
		}
		return r.strFormat(s, nil, d)
	case "center", "ljust", "rjust":
		width, err := a.integer(0, "width", 0)
		if err != nil {
			return nil, err
		}
		fill, err := a.str(1, "fillchar", " ")
		if err != nil {
			return nil, err
		}
		if utf8.RuneCountInString(fill) != 1 {
			return nil, errors.New("the fill character must be exactly one character long")
		}
		return r.justify(s, name, width, fill)
	case "find", "rfind", "index", "rindex", "count":
		sub, err := a.str(0, "sub", "")
		if err != nil {
			return nil, err
		}
		// Like str.startswith, these look at s[start:end] when given start
		// and end, and report positions in s, not in the window.
		win, off, ok := s, int64(0), true
		if len(a.pos) > 1 {
			if win, off, ok, err = strWindow(s, a.pos[1:]); err != nil {
				return nil, err
			}
		}
		if name == "count" {
			switch {
			case !ok:
				return int64(0), nil
			case sub == "":
				return int64(utf8.RuneCountInString(win) + 1), nil
			}
			return int64(strings.Count(win, sub)), nil
		}
		i := -1
		if ok {
			i = strings.Index(win, sub)
			if name == "rfind" || name == "rindex" {
				i = strings.LastIndex(win, sub)
			}
		}
		if i < 0 {
			if name == "index" || name == "rindex" {
				return nil, errors.New("substring not found")
			}
			return int64(-1), nil
		}
		if r.dynamo && (name == "find" || name == "rfind") && len(a.pos) <= 1 {
			// minijinja's find and rfind are Rust's str::find and rfind:
			// the position is a byte offset in the UTF-8 text, not a
			// character index ('ß.'.find('.') is 2).
			return int64(i), nil
		}
		return off + int64(utf8.RuneCountInString(win[:i])), nil
	case "join":
		v, _ := a.get(0, "iterable")
		items, err := seqItems(v)
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		for i, it := range items {
			is, ok := it.(string)
			if !ok && r.dynamo {
				is, ok = r.str(it), true // pycompat writes each item as it prints
			}
			if !ok {
				return nil, fmt.Errorf("sequence item %d: expected str instance, %s found", i, typeName(it))
			}
			if i > 0 {
				b.WriteString(s)
			}
			b.WriteString(is)
			if err := r.chargeBytes(b.Len()); err != nil {
				return nil, err
			}
		}
		return b.String(), nil
	case "splitlines":
		if r.dynamo {
			// Rust's lines(): only \n ends a line (a \r before it is
			// dropped), and a final line break ends the last line; with
			// keepends, each line keeps its \n (and a \r before it).
			keep := a.boolean(0, "keepends", false)
			var out []any
			for s != "" {
				l, rest, nl := strings.Cut(s, "\n")
				switch {
				case nl && keep:
					l += "\n"
				case nl:
					l = strings.TrimSuffix(l, "\r")
				}
				out = append(out, l)
				s = rest
			}
			return &List{Items: out}, nil
		}
		return &List{Items: splitLines(s, a.boolean(0, "keepends", false))}, nil
	case "isdigit", "isalpha", "isspace", "isalnum":
		if s == "" {
			return r.dynamo, nil // minijinja: every character of none is one
		}
		for _, c := range s {
			ok := false
			switch name {
			case "isdigit":
				ok = unicode.IsDigit(c) || r.dynamo && unicode.IsNumber(c) // Rust's is_numeric
			case "isalpha":
				ok = unicode.IsLetter(c)
			case "isspace":
				ok = pyIsSpace(c)
			case "isalnum":
				ok = unicode.IsLetter(c) || unicode.IsDigit(c)
			}
			if !ok {
				return false, nil
			}
		}
		return true, nil
	case "isnumeric", "isdecimal", "isidentifier":
		// Python's: false for "", and each code point numeric (a number's
		// general category: Python's numeric ideographs such as 三 are not
		// counted), a decimal digit (Nd), or an identifier's (a letter or
		// _, then letters, digits, marks and _).
		if s == "" {
			return false, nil
		}
		for i, c := range s {
			var ok bool
			switch name {
			case "isnumeric":
				ok = unicode.IsNumber(c)
			case "isdecimal":
				ok = unicode.Is(unicode.Nd, c)
			default:
				ok = c == '_' || unicode.IsLetter(c) || unicode.Is(unicode.Nl, c) ||
					i > 0 && (unicode.Is(unicode.Nd, c) || unicode.Is(unicode.Mn, c) || unicode.Is(unicode.Mc, c) || unicode.Is(unicode.Pc, c))
			}
			if !ok {
				return false, nil
			}
		}
		return true, nil
	case "isascii", "isprintable":
		// True for "", as in Python; printable is Go's IsPrint (no
		// control, format, private or unassigned code point, no space
		// but U+0020), which is Python's definition.
		for _, c := range s {
			if name == "isascii" && c >= 0x80 || name == "isprintable" && !unicode.IsPrint(c) {
				return false, nil
			}
		}
		return true, nil
	case "islower", "isupper":
		if r.dynamo {
			// minijinja: every character of that case (so not "a1", and
			// "" is).
			is := unicode.IsLower
			if name == "isupper" {
				is = unicode.IsUpper
			}
			for _, c := range s {
				if !is(c) {
					return false, nil
				}
			}
			return true, nil
		}
		if name == "islower" {
			return isLower(s), nil
		}
		return isUpper(s), nil
	case "removeprefix":
		p, err := a.str(0, "prefix", "")
		return strings.TrimPrefix(s, p), err
	case "removesuffix":
		p, err := a.str(0, "suffix", "")
		return strings.TrimSuffix(s, p), err
	case "format":
		return r.strFormat(s, a.pos, a.kw)
	case "partition", "rpartition":
		sep, err := a.str(0, "sep", "")
		if err != nil || sep == "" {
			return nil, errors.New("empty separator")
		}
		i := strings.Index(s, sep)
		if name == "rpartition" {
			i = strings.LastIndex(s, sep)
		}
		if i < 0 {
			if name == "rpartition" {
				return &List{Items: []any{"", "", s}, Tuple: true}, nil
			}
			return &List{Items: []any{s, "", ""}, Tuple: true}, nil
		}
		return &List{Items: []any{s[:i], sep, s[i+len(sep):]}, Tuple: true}, nil
	}
	return nil, fmt.Errorf("str method '%s' is not supported", name)
}

// strWindow is s[start:end] for the optional start and end arguments of
// str.find, count, startswith and their kin, with Python's index rules:
// negative indices count from the end, None is the default, end is clamped
// to the length. off is the window's first index in s (in code points); ok
// is false when start lies past end or past the end of s, where nothing
// matches, not even "".
func strWindow(s string, bounds []any) (win string, off int64, ok bool, err error) {
	rs := []rune(s)
	n := int64(len(rs))
	bound := func(i int, def int64) (int64, error) {
		if i >= len(bounds) || bounds[i] == nil {
			return def, nil
		}
		v, isInt := intOf(bounds[i])
		if !isInt {
			return 0, errors.New("slice indices must be integers or None or have an __index__ method")
		}
		if v < 0 {
			v = max(v+n, 0)
		}
		return v, nil
	}
	start, err := bound(0, 0)
	if err != nil {
		return "", 0, false, err
	}
	end, err := bound(1, n)
	if err != nil {
		return "", 0, false, err
	}
	end = min(end, n)
	if start > n || end < start {
		return "", 0, false, nil
	}
	return string(rs[start:end]), start, true, nil
}

// splitLines is Python's str.splitlines: lines end at \n, \r, \r\n, \v,
// \f, \x1c, \x1d, \x1e, \x85, U+2028 and U+2029, and a final line ending
// adds no empty line.
func splitLines(s string, keepends bool) []any {
	var out []any
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch r {
		case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		default:
			i += n
			continue
		}
		end := i + n
		if r == '\r' && end < len(s) && s[end] == '\n' {
			end++
		}
		if keepends {
			out = append(out, s[start:end])
		} else {
			out = append(out, s[start:i])
		}
		start, i = end, end
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	if out == nil {
		out = []any{}
	}
	return out
}

// isLower is Python's str.islower: some cased character and no upper-case
// one.
func isLower(s string) bool {
	cased := false
	for _, c := range s {
		if pyIsUpperRune(c) || unicode.IsTitle(c) {
			return false
		}
		if pyIsLowerRune(c) {
			cased = true
		}
	}
	return cased
}

// isUpper is Python's str.isupper.
func isUpper(s string) bool {
	cased := false
	for _, c := range s {
		if pyIsLowerRune(c) || unicode.IsTitle(c) {
			return false
		}
		if pyIsUpperRune(c) {
			cased = true
		}
	}
	return cased
}

// isTitle is Python's str.istitle: some cased character, upper- and
// title-case ones only after an uncased one, lower-case ones only after a
// cased one.
func isTitle(s string) bool {
	cased, prevCased := false, false
	for _, c := range s {
		switch {
		case pyIsUpperRune(c) || unicode.IsTitle(c):
			if prevCased {
				return false
			}
			prevCased, cased = true, true
		case pyIsLowerRune(c):
			if !prevCased {
				return false
			}
			prevCased, cased = true, true
		default:
			prevCased = false
		}
	}
	return cased
}

func splitWhitespace(s string, maxs int, fromRight bool) []string {
	if !fromRight || maxs < 0 {
		var out []string
		rest := s
		for {
			rest = rest[pyLStripLen(rest):]
			if rest == "" {
				return orEmpty(out)
			}
			if maxs >= 0 && len(out) == maxs {
				return append(out, rest)
			}
			i := strings.IndexFunc(rest, pyIsSpace)
			if i < 0 {
				return append(out, rest)
			}
			out = append(out, rest[:i])
			rest = rest[i:]
		}
	}
	// rsplit with a limit: the head keeps its leading whitespace
	rest := pyRStrip(s)
	var tail []string
	for len(tail) < maxs {
		i := strings.LastIndexFunc(rest, pyIsSpace)
		if i < 0 {
			break
		}
		_, n := utf8.DecodeRuneInString(rest[i:])
		tail = append([]string{rest[i+n:]}, tail...)
		rest = pyRStrip(rest[:i])
	}
	if rest == "" {
		return orEmpty(tail)
	}
	return append([]string{rest}, tail...)
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func rsplitN(s, sep string, n int) []string {
	var tail []string
	for len(tail) < n {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		tail = append([]string{s[i+len(sep):]}, tail...)
		s = s[:i]
	}
	return append([]string{s}, tail...)
}

// percentFormat is Python's "%" string formatting for the conversions
// templates use (s r d i f F e E g G x X o c and %%) with flags, width and
// precision.
func (r *renderer) percentFormat(f string, arg any) (any, error) {
	var args []any
	if l, ok := arg.(*List); ok && l.Tuple {
		args = l.Items
	} else {
		args = []any{arg}
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		// A mapping key: "%(name)s" takes the argument from a dict.
		var key *string
		if i < len(f) && f[i] == '(' {
			depth, k := 1, i+1
			for ; k < len(f) && depth > 0; k++ {
				switch f[k] {
				case '(':
					depth++
				case ')':
					depth--
				}
			}
			if depth > 0 {
				return nil, errors.New("incomplete format key")
			}
			name := f[i+1 : k-1]
			key = &name
			i = k
		}
		// flags, width, precision
		j := i
		for j < len(f) && strings.IndexByte("-+ 0#", f[j]) >= 0 {
			j++
		}
		flags := f[i:j]
		// A '*' width or precision takes the next argument, an int; a
		// negative width means left alignment.
		star := func() (int, error) {
			if key != nil || n >= len(args) {
				return 0, errors.New("* wants int")
			}
			var w int64
			switch x := args[n].(type) {
			case int64:
				w = x
			case bool:
				w, _ = intOf(x)
			default:
				return 0, errors.New("* wants int")
			}
			n++
			if w > maxOutputWidth || w < -maxOutputWidth {
				return 0, fmt.Errorf("%w: format width or precision over %d", ErrRenderUnavailable, maxOutputWidth)
			}
			return int(w), nil
		}
		k := j
		var width int
		if k < len(f) && f[k] == '*' {
			w, err := star()
			if err != nil {
				return nil, err
			}
			if w < 0 {
				flags += "-"
				w = -w
			}
			width = w
			k++
		} else {
			for k < len(f) && f[k] >= '0' && f[k] <= '9' {
				k++
			}
			width, _ = strconv.Atoi(f[j:k])
		}
		prec := -1
		if k < len(f) && f[k] == '.' {
			k++
			if k < len(f) && f[k] == '*' {
				p, err := star()
				if err != nil {
					return nil, err
				}
				prec = max(p, 0)
				k++
			} else {
				m := k
				for k < len(f) && f[k] >= '0' && f[k] <= '9' {
					k++
				}
				prec, _ = strconv.Atoi(f[m:k])
			}
		}
		if k >= len(f) {
			return nil, errors.New("incomplete format")
		}
		i = k
		verb := f[i]
		if verb == '%' {
			b.WriteByte('%')
			continue
		}
		var v any
		if key != nil {
			d, ok := arg.(*Dict)
			if !ok {
				return nil, errors.New("format requires a mapping")
			}
			if v, ok = d.Get(*key); !ok {
				return nil, fmt.Errorf("KeyError: %s", toReprString(*key))
			}
			n = len(args)
		} else {
			if n >= len(args) {
				return nil, errors.New("not enough arguments for format string")
			}
			v = args[n]
			n++
		}
		if width > maxOutputWidth || prec > maxOutputWidth {
			return nil, fmt.Errorf("%w: format width or precision over %d", ErrRenderUnavailable, maxOutputWidth)
		}
		var s string
		numeric := true
		switch verb {
		case 's', 'r':
			numeric = false
			if verb == 's' {
				s = toStr(v)
			} else {
				s = toReprString(v)
			}
			if prec >= 0 && utf8.RuneCountInString(s) > prec {
				s = string([]rune(s)[:prec])
			}
		case 'd', 'i', 'x', 'X', 'o':
			var iv int64
			switch x := v.(type) {
			case int64:
				iv = x
			case bool:
				iv, _ = intOf(x)
			case float64:
				if verb != 'd' && verb != 'i' {
					return nil, fmt.Errorf("%%%c format: an integer is required, not float", verb)
				}
				if math.IsInf(x, 0) || math.IsNaN(x) || math.Abs(x) >= 1<<63 {
					return nil, errors.New("integer overflow: integers are 64-bit here")
				}
				iv = int64(x)
			default:
				return nil, fmt.Errorf("%%%c format: a real number is required, not %s", verb, typeName(v))
			}
			base := map[byte]int{'d': 10, 'i': 10, 'x': 16, 'X': 16, 'o': 8}[verb]
			neg := iv < 0
			u := uint64(iv)
			if neg {
				u = -u
			}
			s = strconv.FormatUint(u, base)
			// The alternate form prefixes 0x, 0X or 0o.
			if strings.Contains(flags, "#") {
				switch verb {
				case 'x':
					s = "0x" + s
				case 'X':
					s = "0X" + s
				case 'o':
					s = "0o" + s
				}
			}
			if verb == 'X' {
				s = strings.ToUpper(s)
			}
			if neg {
				s = "-" + s
			}
		case 'f', 'F', 'e', 'E', 'g', 'G':
			fv, ok := asNumber(v)
			if !ok {
				return nil, fmt.Errorf("must be real number, not %s", typeName(v))
			}
			if prec < 0 {
				prec = 6
			}
			s = formatFloatC(fv, verb, prec)
		case 'c':
			numeric = false
			switch x := v.(type) {
			case int64:
				s = string(rune(x))
			case string:
				s = x
			}
		default:
			return nil, fmt.Errorf("unsupported format character '%c'", verb)
		}
		if numeric && !strings.HasPrefix(s, "-") {
			switch {
			case strings.Contains(flags, "+"):
				s = "+" + s
			case strings.Contains(flags, " "):
				s = " " + s
			}
		}
		if pad := width - utf8.RuneCountInString(s); pad > 0 {
			switch {
			case strings.Contains(flags, "-"):
				s += strings.Repeat(" ", pad)
			case numeric && strings.Contains(flags, "0"):
				sign := ""
				if s != "" && (s[0] == '-' || s[0] == '+' || s[0] == ' ') {
					sign, s = s[:1], s[1:]
				}
				if strings.Contains(flags, "#") && len(s) >= 2 && s[0] == '0' && strings.IndexByte("xXo", s[1]) >= 0 {
					sign, s = sign+s[:2], s[2:]
				}
				s = sign + strings.Repeat("0", pad) + s
			default:
				s = strings.Repeat(" ", pad) + s
			}
		}
		b.WriteString(s)
		if err := r.chargeBytes(b.Len()); err != nil {
			return nil, err
		}
	}
	// A mapping (for Python, anything with __getitem__ but a tuple) may go
	// unused.
	_, isDict := arg.(*Dict)
	_, isUndef := arg.(undefined)
	l, isList := arg.(*List)
	if n < len(args) && !isDict && !isUndef && (!isList || l.Tuple) {
		return nil, errors.New("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

// maxOutputWidth bounds a width or precision in a format.
const maxOutputWidth = 4096

// formatFloatC formats like C's printf %f, %e and %g.
func formatFloatC(f float64, verb byte, prec int) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	switch verb {
	case 'f', 'F':
		return strconv.FormatFloat(f, 'f', prec, 64)
	case 'e', 'E':
		s := fixExponent(strconv.FormatFloat(f, 'e', prec, 64))
		if verb == 'E' {
			s = strings.ToUpper(s)
		}
		return s
	}
	if prec == 0 {
		prec = 1
	}
	s := fixExponent(strconv.FormatFloat(f, 'g', prec, 64))
	if verb == 'G' {
		s = strings.ToUpper(s)
	}
	return s
}

// fixExponent turns Go's e+5 into C's e+05.
func fixExponent(s string) string {
	i := strings.LastIndexAny(s, "e")
	if i < 0 || i+2 >= len(s) {
		return s
	}
	if len(s)-(i+2) == 1 {
		return s[:i+2] + "0" + s[i+2:]
	}
	return s
}

// roundInt is Python's round(i, ndigits) on an int: an int, rounded to a
// multiple of 10**-ndigits with ties to even when ndigits is negative.
func roundInt(i, prec int64) (any, error) {
	if prec >= 0 {
		return i, nil
	}
	if prec < -18 {
		// 10**19 exceeds every int64: the nearest multiple is 0, or
		// +-10**19 (out of range) past half of it.
		const half = 5_000_000_000_000_000_000
		if prec == -19 && (i > half || i < -half) {
			return nil, errors.New("integer overflow: integers are 64-bit here")
		}
		return int64(0), nil
	}
	m := int64(1)
	for ; prec < 0; prec++ {
		m *= 10
	}
	q, rem := i/m, i%m
	if rem < 0 {
		q, rem = q-1, rem+m
	}
	if 2*rem > m || 2*rem == m && q%2 != 0 {
		q++
	}
	if q > math.MaxInt64/m || q < math.MinInt64/m {
		return nil, errors.New("integer overflow: integers are 64-bit here")
	}
	return q * m, nil
}

// pyRound is Python's round(f, ndigits): correctly rounded, ties to even.
func pyRound(f float64, prec int64) float64 {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return f
	}
	if prec < 0 {
		p := math.Pow(10, float64(-prec))
		return math.RoundToEven(f/p) * p
	}
	if prec > 300 {
		return f
	}
	out, err := strconv.ParseFloat(strconv.FormatFloat(f, 'f', int(prec), 64), 64)
	if err != nil {
		return f
	}
	if out == 0 && math.Signbit(f) {
		return math.Copysign(0, -1)
	}
	return out
}

// asciiEscape turns DEL and every non-ASCII character of a JSON text into \uXXXX
// escapes (UTF-16 surrogate pairs above U+FFFF), as ensure_ascii=True does;
// non-ASCII characters only occur inside strings.
func asciiEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch {
		case c < 0x7f:
			b.WriteRune(c)
		case c > 0xffff:
			r1, r2 := utf16.EncodeRune(c)
			fmt.Fprintf(&b, "\\u%04x\\u%04x", r1, r2)
		default:
			fmt.Fprintf(&b, "\\u%04x", c)
		}
	}
	return b.String()
}

// none is an error when a filter that takes no arguments (minijinja's
// int and float) is given some.
func (a argList) none() error {
	if len(a.pos) > 0 || a.kw != nil && a.kw.Len() > 0 {
		return errors.New("too many arguments")
	}
	return nil
}

// mjHTMLEscape is minijinja's HTML escaping (the slash too).
var mjHTMLEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#x27;", "/", "&#x2f;")

// mjTitle is minijinja's title: the first character after white space or
// ASCII punctuation (or at the start) upper-cased, every other lower-cased
// (a digit does not start a word: "x1y" is "X1y"; "it's" is "It'S").
func mjTitle(s string) string {
	var b strings.Builder
	start := true
	for _, c := range s {
		switch {
		case c < utf8.RuneSelf && (unicode.IsPunct(c) || unicode.IsSymbol(c)) || unicode.IsSpace(c):
			b.WriteRune(c)
			start = true
		case start:
			b.WriteString(strings.ToUpper(string(c)))
			start = false
		default:
			b.WriteString(strings.ToLower(string(c)))
		}
	}
	return b.String()
}

// mjInt is minijinja's int filter: none and undefined are 0, a bool 0 or
// 1, a float truncated, a string an integer or else a float (Rust's
// grammar: no white space, no base prefix) truncated, anything else an
// error; it takes no default.
func mjInt(v any, a argList) (any, error) {
	if err := a.none(); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case nil, undefined:
		return int64(0), nil
	case string:
		if i, err := strconv.ParseInt(x, 10, 64); err == nil {
			return i, nil
		}
		f, ok := rustParseFloat(x)
		if !ok {
			return nil, errors.New("invalid float literal")
		}
		return saturatingInt(f), nil
	case float64:
		return saturatingInt(x), nil
	}
	if i, ok := intOf(v); ok {
		return i, nil
	}
	return nil, fmt.Errorf("cannot convert %s to integer", typeName(v))
}

// mjFloat is minijinja's float filter: none and undefined are 0.0, a
// string parsed by Rust's grammar (an error when it is not a number).
func mjFloat(v any, a argList) (any, error) {
	if err := a.none(); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case nil, undefined:
		return 0.0, nil
	case string:
		f, ok := rustParseFloat(x)
		if !ok {
			return nil, errors.New("invalid float literal")
		}
		return f, nil
	}
	if f, ok := asNumber(v); ok {
		return f, nil
	}
	return nil, fmt.Errorf("cannot convert %s to float", typeName(v))
}

// rustParseFloat parses s as Rust's f64 FromStr does: an optional sign,
// then digits with an optional fraction and exponent, or inf, infinity or
// nan in any case; a value too large is an infinity, not an error.
func rustParseFloat(s string) (float64, bool) {
	if s == "" || strings.ContainsAny(s, "_xXpP \t\n\r") {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, true
}

// saturatingInt is Rust's float-to-integer cast: truncated, NaN 0, out of
// range the nearest bound (here int64's, where minijinja's is i128's).
func saturatingInt(f float64) int64 {
	switch {
	case math.IsNaN(f):
		return 0
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

// mjRound is minijinja's round: an integer as it is, a float rounded half
// away from zero after scaling by 10**precision; there is no method.
func mjRound(v any, prec int64, a argList) (any, error) {
	if len(a.pos) > 1 {
		return nil, errors.New("too many arguments")
	}
	if a.kw != nil && a.kw.Len() > 0 {
		if _, ok := a.kw.Get("precision"); !ok || a.kw.Len() > 1 {
			return nil, errors.New("too many arguments")
		}
	}
	if i, ok := v.(int64); ok {
		return i, nil
	}
	f, ok := asNumber(v)
	if _, isBool := v.(bool); !ok || isBool {
		// A bool is no number in minijinja: rounding one is an error.
		return nil, fmt.Errorf("cannot round value of type %s", typeName(v))
	}
	p := math.Pow(10, float64(prec))
	return math.Round(f*p) / p, nil
}

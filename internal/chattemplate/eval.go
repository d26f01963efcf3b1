package chattemplate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// scope holds the variables of one frame; frames are small, so a linear
// search over a few names beats a map.
type scope struct {
	names  []string
	vals   []any
	parent *scope
}

func (s *scope) lookup(name string) (any, bool) {
	for c := s; c != nil; c = c.parent {
		for i, n := range c.names {
			if n == name {
				return c.vals[i], true
			}
		}
	}
	return nil, false
}

func (s *scope) set(name string, v any) {
	for i, n := range s.names {
		if n == name {
			s.vals[i] = v
			return
		}
	}
	s.names = append(s.names, name)
	s.vals = append(s.vals, v)
}

type macro struct {
	def     *macroDef
	name    string
	closure *scope
}

type loopInfo struct {
	items []any // the items so far accepted
	i     int
	// lastChanged holds the arguments of the last loop.changed call (nil
	// before the first).
	lastChanged *List
	// depth is the loop's level, 1 unless it runs from a recursive call.
	depth int
	// recurse runs a recursive loop again over the given items one level
	// deeper and gives its output; nil when the loop is not recursive.
	recurse func(items any) (any, error)
	// With a loop filter: the items not yet examined and the test.
	src    []any
	accept func(any) (bool, error)
}

// fill examines source items until item n is accepted or none are left
// (n < 0: all of them).
func (li *loopInfo) fill(n int) error {
	for len(li.src) > 0 && (n < 0 || len(li.items) <= n) {
		item := li.src[0]
		li.src = li.src[1:]
		ok, err := li.accept(item)
		if err != nil {
			return err
		}
		if ok {
			li.items = append(li.items, item)
		}
	}
	return nil
}

type ctrl uint8

const (
	ctrlNone ctrl = iota
	ctrlBreak
	ctrlContinue
)

// maxCallDepth bounds macro recursion.
const maxCallDepth = 100

type renderer struct {
	ctx       context.Context
	fuel      int64
	maxOutput int
	deadline  time.Time
	now       func() time.Time
	// dynamo: render as Dynamo's frontend does (WithDynamoFrontend).
	dynamo bool
	tick   int
	depth  int
	// top is the template's top-level scope, which blocks see.
	top *scope
}

func (r *renderer) overflow() error {
	return fmt.Errorf("%w: %w: more than %d bytes", ErrRenderUnavailable, ErrOutputTooLarge, r.maxOutput)
}

// step spends n units of fuel and checks the clock and the context now and
// then.
func (r *renderer) step(n int64) error {
	r.fuel -= n
	if r.fuel < 0 {
		return fmt.Errorf("%w: instruction budget exhausted", ErrRenderUnavailable)
	}
	r.tick += int(n)
	if r.tick >= 512 {
		r.tick = 0
		if err := r.ctx.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrRenderUnavailable, err)
		}
		if !r.deadline.IsZero() && time.Now().After(r.deadline) {
			return fmt.Errorf("%w: wall-clock budget exceeded", ErrRenderUnavailable)
		}
	}
	return nil
}

// chargeBytes spends fuel for producing n bytes and checks the size limit
// every produced string is held to.
func (r *renderer) chargeBytes(n int) error {
	if n > r.maxOutput {
		return r.overflow()
	}
	return r.step(int64(n>>6) + 1)
}

// chargeItems spends fuel for building a list of n items; no list may hold
// more items than the output limit has bytes.
func (r *renderer) chargeItems(n int) error {
	if n > r.maxOutput {
		return fmt.Errorf("%w: list longer than %d items", ErrRenderUnavailable, r.maxOutput)
	}
	return r.step(int64(n) + 1)
}

type output struct {
	b strings.Builder
}

func (r *renderer) write(o *output, s string) error {
	if o.b.Len()+len(s) > r.maxOutput {
		return r.overflow()
	}
	if err := r.step(int64(len(s)>>6) + 1); err != nil {
		return err
	}
	o.b.WriteString(s)
	return nil
}

// blockScope is the scope of a set block's or a filter block's body: a
// scope of its own in Jinja, whose assignments stay inside the block; in
// minijinja (WithDynamoFrontend) the enclosing one, since it only
// captures the body's output, so a variable set inside is set after it.
func (r *renderer) blockScope(s *scope) *scope {
	if r.dynamo {
		return s
	}
	return &scope{parent: s}
}

// filterBlock applies a block's filters, in order, to what it rendered.
func (r *renderer) filterBlock(filters []*filterExpr, v any, s *scope) (any, error) {
	for _, f := range filters {
		var err error
		if v, err = r.applyFilter(f, v, s); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (r *renderer) execBody(body []stmt, s *scope, o *output) (ctrl, error) {
	for _, st := range body {
		c, err := r.exec(st, s, o)
		if err != nil || c != ctrlNone {
			return c, err
		}
	}
	return ctrlNone, nil
}

func (r *renderer) exec(st stmt, s *scope, o *output) (ctrl, error) {
	if err := r.step(1); err != nil {
		return ctrlNone, err
	}
	switch n := st.(type) {
	case *dataStmt:
		return ctrlNone, r.write(o, n.text)
	case *printStmt:
		if b, ok := n.x.(*binExpr); ok && b.op == "+" {
			// {{ a + b + c }} of strings prints each part: the joined
			// string would only be copied into the output again.
			var buf [8]any
			vals, _, allStrings, err := r.plusOperands(b, s, buf[:0])
			if err != nil {
				return ctrlNone, lineErr(n.line, err)
			}
			if !allStrings {
				v, err := r.sumValues(vals)
				if err != nil {
					return ctrlNone, lineErr(n.line, err)
				}
				return ctrlNone, r.write(o, r.str(v))
			}
			for _, v := range vals {
				if err := r.write(o, v.(string)); err != nil {
					return ctrlNone, err
				}
			}
			return ctrlNone, nil
		}
		v, err := r.eval(n.x, s)
		if err != nil {
			return ctrlNone, lineErr(n.line, err)
		}
		return ctrlNone, r.write(o, r.str(v))
	case *ifStmt:
		for i, c := range n.conds {
			v, err := r.eval(c, s)
			if err != nil {
				return ctrlNone, err
			}
			if truthy(v) {
				return r.execBody(n.bodies[i], s, o)
			}
		}
		return r.execBody(n.els, s, o)
	case *forStmt:
		c, err := r.execFor(n, s, o)
		return c, lineErr(n.line, err)
	case *setStmt:
		return ctrlNone, lineErr(n.line, r.execSet(n, s))
	case *setBlockStmt:
		sub := &output{}
		// break and continue inside the block leave it, unassigned, as
		// in the Python code Jinja compiles to.
		// The block's body has a scope of its own (in minijinja it has
		// not: blockScope).
		if c, err := r.execBody(n.body, r.blockScope(s), sub); err != nil || c != ctrlNone {
			return c, err
		}
		v, err := r.filterBlock(n.filters, sub.b.String(), s)
		if err != nil {
			return ctrlNone, err
		}
		s.set(n.target, v)
		return ctrlNone, nil
	case *macroStmt:
		s.set(n.m.name, &macro{def: n.m, name: n.m.name, closure: s})
		return ctrlNone, nil
	case *breakStmt:
		return ctrlBreak, nil
	case *contStmt:
		return ctrlContinue, nil
	case *filterBlockStmt:
		sub := &output{}
		if c, err := r.execBody(n.body, r.blockScope(s), sub); err != nil || c != ctrlNone {
			return c, err
		}
		v, err := r.filterBlock(n.filters, sub.b.String(), s)
		if err != nil {
			return ctrlNone, err
		}
		return ctrlNone, r.write(o, r.str(v))
	case *blockStmt:
		if n.required {
			return ctrlNone, fmt.Errorf("line %d: required block '%s' not found", n.line, n.name)
		}
		parent := r.top
		if n.scoped || parent == nil {
			parent = s
		}
		_, err := r.execBody(n.body, &scope{parent: parent}, o)
		return ctrlNone, err
	case *loadStmt:
		name, err := r.eval(n.name, s)
		if err != nil {
			return ctrlNone, lineErr(n.line, err)
		}
		if n.ignoreMissing && r.dynamo {
			// minijinja finds no template without a loader, and an
			// include told to ignore a missing one renders nothing.
			return ctrlNone, nil
		}
		return ctrlNone, fmt.Errorf("line %d: %s of template %s: templates have no loader", n.line, n.tag, r.str(name))
	case *withStmt:
		inner := &scope{parent: s}
		for i, name := range n.names {
			v, err := r.eval(n.vals[i], s)
			if err != nil {
				return ctrlNone, err
			}
			inner.set(name, v)
		}
		return r.execBody(n.body, inner, o)
	case *callBlockStmt:
		caller := &macro{def: &macroDef{name: "caller", params: n.params, defaults: n.defs, body: n.body}, name: "caller", closure: s}
		v, err := r.evalCall(n.call, s, caller)
		if err != nil {
			return ctrlNone, err
		}
		return ctrlNone, r.write(o, r.str(v))
	}
	return ctrlNone, fmt.Errorf("internal: unknown statement %T", st)
}

func lineErr(line int, err error) error {
	if err == nil || errors.Is(err, ErrRenderUnavailable) {
		return err
	}
	var le *lineError
	if errors.As(err, &le) {
		return err
	}
	return &lineError{line: line, err: err}
}

type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *lineError) Unwrap() error { return e.err }

func (r *renderer) execSet(n *setStmt, s *scope) error {
	v, err := r.eval(n.x, s)
	if err != nil {
		return err
	}
	if n.nsAttr != "" {
		obj, ok := s.lookup(n.targets[0])
		ns, isNS := obj.(*Namespace)
		if !ok || !isNS {
			return errors.New("cannot assign attribute on non-namespace object")
		}
		ns.d.Set(n.nsAttr, v)
		return nil
	}
	if n.tree != nil {
		return r.bindTree(n.tree, s, v)
	}
	if !n.unpack {
		s.set(n.targets[0], v)
		return nil
	}
	items, err := r.unpack(v, len(n.targets))
	if err != nil {
		return err
	}
	for i, t := range n.targets {
		s.set(t, items[i])
	}
	return nil
}

func (r *renderer) unpack(v any, n int) ([]any, error) {
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) != n {
		if len(items) > n {
			return nil, fmt.Errorf("too many values to unpack (expected %d)", n)
		}
		return nil, fmt.Errorf("not enough values to unpack (expected %d, got %d)", n, len(items))
	}
	return items, nil
}

// iterate returns the items Python iteration yields.
func (r *renderer) iterate(v any) ([]any, error) {
	switch x := v.(type) {
	case *List:
		return x.Items, nil
	case *Dict:
		return x.keys, nil
	case string:
		if err := r.step(int64(len(x))); err != nil {
			return nil, err
		}
		out := make([]any, 0, len(x))
		for _, c := range x {
			out = append(out, string(c))
		}
		return out, nil
	case undefined:
		return nil, nil
	case nil:
		if r.dynamo {
			return nil, nil // minijinja iterates none as an empty sequence
		}
	}
	return nil, fmt.Errorf("'%s' object is not iterable", typeName(v))
}

func (r *renderer) execFor(n *forStmt, s *scope, o *output) (ctrl, error) {
	it, err := r.eval(n.iter, s)
	if err != nil {
		return ctrlNone, err
	}
	return r.runLoop(n, s, o, it, 1)
}

// runLoop runs a for loop over it at the given depth. A recursive loop's
// loop(items) runs it again over items in the same scope, one level
// deeper, and gives what that run wrote; the depth counts against the same
// bound as macro calls.
func (r *renderer) runLoop(n *forStmt, s *scope, o *output, it any, depth int) (ctrl, error) {
	items, err := r.iterate(it)
	if err != nil {
		return ctrlNone, err
	}
	li := &loopInfo{items: items, depth: depth}
	// One frame serves every iteration. Jinja2 empties it before each, so
	// nothing set in one iteration is seen by the next; minijinja keeps
	// it, so a name set in one iteration is still set in the next until
	// assigned again.
	inner := &scope{parent: s, names: make([]string, 0, 4), vals: make([]any, 0, 4)}
	if n.recursive {
		// Jinja2's loop(items) runs the loop again in the scope around
		// it; minijinja's pushes the new loop's frame over the current
		// iteration's, whose names it then sees.
		outer := s
		if r.dynamo {
			outer = inner
		}
		li.recurse = func(sub any) (any, error) {
			r.depth++
			defer func() { r.depth-- }()
			if r.depth > maxCallDepth {
				return nil, fmt.Errorf("%w: loop recursion deeper than %d", ErrRenderUnavailable, maxCallDepth)
			}
			buf := &output{}
			if _, err := r.runLoop(n, outer, buf, sub, depth+1); err != nil {
				return nil, err
			}
			return buf.b.String(), nil
		}
	}
	if n.cond != nil && (!r.dynamo || depth == 1) {
		// Jinja filters lazily, interleaved with the body (and ahead of it
		// only as far as loop.last, loop.length and the like need): the
		// condition sees what earlier iterations changed. minijinja
		// filters every item in a loop of its own before the body runs
		// once, and a recursive loop(...) call iterates its items
		// unfiltered.
		li.items, li.src = nil, items
		li.accept = func(item any) (bool, error) {
			probe := &scope{parent: s}
			if err := r.bindTargets(n, probe, item); err != nil {
				return false, err
			}
			c, err := r.eval(n.cond, probe)
			return truthy(c), err
		}
		if r.dynamo {
			if err := li.fill(-1); err != nil {
				return ctrlNone, err
			}
		}
	}
	// Jinja runs the else block unless some iteration finished its body:
	// an empty loop, or one whose every iteration ended in break or
	// continue.
	completed := false
	for i := 0; ; i++ {
		if err := li.fill(i); err != nil {
			return ctrlNone, err
		}
		if i >= len(li.items) {
			break
		}
		if err := r.step(1); err != nil {
			return ctrlNone, err
		}
		li.i = i
		if !r.dynamo {
			clear(inner.vals)
			inner.names, inner.vals = inner.names[:0], inner.vals[:0]
		}
		inner.set("loop", li)
		if err := r.bindTargets(n, inner, li.items[i]); err != nil {
			return ctrlNone, err
		}
		c, err := r.execBody(n.body, inner, o)
		if err != nil {
			return ctrlNone, err
		}
		if c == ctrlBreak {
			break
		}
		if c == ctrlNone {
			completed = true
		}
	}
	if !completed && len(n.els) > 0 {
		// The else block has a scope of its own, and runs outside this
		// loop: its break and continue belong to an enclosing one.
		return r.execBody(n.els, &scope{parent: s}, o)
	}
	return ctrlNone, nil
}

// pyFloatDivmod is Python's divmod of floats: the remainder takes the
// divisor's sign (a zero one included), and the quotient is derived from
// it and snapped to the nearest integer, so 1 // 0.1 is 9.0 as in Python
// (not floor(1 / 0.1), which is 10.0).
func pyFloatDivmod(a, b float64) (float64, float64) {
	mod := math.Mod(a, b)
	div := (a - mod) / b
	if mod != 0 {
		if (b < 0) != (mod < 0) {
			mod += b
			div--
		}
	} else {
		mod = math.Copysign(0, b)
	}
	if div == 0 {
		return math.Copysign(0, a/b), mod
	}
	floor := math.Floor(div)
	if div-floor > 0.5 {
		floor++
	}
	return floor, mod
}

// bindTree assigns v to a nested tuple target, unpacking at each level.
func (r *renderer) bindTree(t *target, s *scope, v any) error {
	if t.name != "" {
		s.set(t.name, v)
		return nil
	}
	vals, err := r.unpack(v, len(t.items))
	if err != nil {
		return err
	}
	for i, sub := range t.items {
		if err := r.bindTree(sub, s, vals[i]); err != nil {
			return err
		}
	}
	return nil
}

func (r *renderer) bindTargets(n *forStmt, inner *scope, item any) error {
	if n.tree != nil {
		return r.bindTree(n.tree, inner, item)
	}
	if !n.unpack {
		inner.set(n.targets[0], item)
		return nil
	}
	vals, err := r.unpack(item, len(n.targets))
	if err != nil {
		return err
	}
	for i, t := range n.targets {
		inner.set(t, vals[i])
	}
	return nil
}

// global is the environment's global of that name. cycler and joiner are
// Jinja's and minijinja-contrib's; Dynamo's frontend registers none of
// contrib's globals (only its Python methods), so they are undefined there.
func (r *renderer) global(name string) (any, bool) {
	if r.dynamo && (name == "cycler" || name == "joiner") {
		return nil, false
	}
	g, ok := globals[name]
	return g, ok
}

func (r *renderer) eval(x expr, s *scope) (any, error) {
	if err := r.step(1); err != nil {
		return nil, err
	}
	switch n := x.(type) {
	case *constExpr:
		return n.v, nil
	case *nameExpr:
		if v, ok := s.lookup(n.name); ok {
			return v, nil
		}
		if g, ok := r.global(n.name); ok {
			return g, nil
		}
		return undefined{name: "'" + n.name + "' is undefined"}, nil
	case *attrExpr:
		obj, err := r.eval(n.obj, s)
		if err != nil {
			return nil, err
		}
		if r.dynamo {
			return mjAttr(obj, n.name)
		}
		return getAttr(obj, n.name)
	case *itemExpr:
		obj, err := r.eval(n.obj, s)
		if err != nil {
			return nil, err
		}
		key, err := r.eval(n.key, s)
		if err != nil {
			return nil, err
		}
		if r.dynamo {
			return mjItem(obj, key)
		}
		return getItem(obj, key)
	case *sliceExpr:
		return r.evalSlice(n, s)
	case *callExpr:
		return r.evalCall(n, s, nil)
	case *filterExpr:
		v, err := r.eval(n.node, s)
		if err != nil {
			return nil, err
		}
		return r.applyFilter(n, v, s)
	case *testExpr:
		v, err := r.eval(n.node, s)
		if err != nil {
			return nil, err
		}
		args, err := r.evalList(n.args, s)
		if err != nil {
			return nil, err
		}
		ok, err := r.applyTest(n.name, v, args)
		if err != nil {
			return nil, err
		}
		return ok != n.negate, nil
	case *binExpr:
		if n.op == "+" {
			if inner, ok := n.l.(*binExpr); ok && inner.op == "+" {
				return r.evalPlusChain(n, s)
			}
		}
		l, err := r.eval(n.l, s)
		if err != nil {
			return nil, err
		}
		rv, err := r.eval(n.r, s)
		if err != nil {
			return nil, err
		}
		return r.binop(n.op, l, rv)
	case *unaryExpr:
		v, err := r.eval(n.x, s)
		if err != nil {
			return nil, err
		}
		switch n.op {
		case "not":
			return !truthy(v), nil
		case "-":
			switch y := v.(type) {
			case bool:
				i, _ := intOf(y)
				return -i, nil
			case int64:
				if y == math.MinInt64 {
					return nil, errors.New("integer overflow")
				}
				return -y, nil
			case float64:
				return -y, nil
			case bigInt:
				if rest, ok := strings.CutPrefix(string(y), "-"); ok {
					return bigInt(rest), nil
				}
				return "-" + y, nil
			}
			return nil, fmt.Errorf("bad operand type for unary -: '%s'", typeName(v))
		default:
			switch y := v.(type) {
			case bool:
				i, _ := intOf(y)
				return i, nil
			case int64, float64, bigInt:
				return y, nil
			}
			return nil, fmt.Errorf("bad operand type for unary +: '%s'", typeName(v))
		}
	case *cmpExpr:
		l, err := r.eval(n.first, s)
		if err != nil {
			return nil, err
		}
		for i, op := range n.ops {
			rv, err := r.eval(n.rest[i], s)
			if err != nil {
				return nil, err
			}
			ok, err := r.cmpop(op, l, rv)
			if err != nil {
				return nil, err
			}
			if !ok {
				return false, nil
			}
			l = rv
		}
		return true, nil
	case *andExpr:
		l, err := r.eval(n.l, s)
		if err != nil || !truthy(l) {
			return l, err
		}
		return r.eval(n.r, s)
	case *orExpr:
		l, err := r.eval(n.l, s)
		if err != nil || truthy(l) {
			return l, err
		}
		return r.eval(n.r, s)
	case *condExpr:
		t, err := r.eval(n.test, s)
		if err != nil {
			return nil, err
		}
		if truthy(t) {
			return r.eval(n.a, s)
		}
		if n.b == nil {
			return undefined{}, nil
		}
		return r.eval(n.b, s)
	case *listExpr:
		items, err := r.evalList(n.items, s)
		if err != nil {
			return nil, err
		}
		if items == nil {
			items = []any{}
		}
		return &List{Items: items, Tuple: n.tuple}, nil
	case *dictExpr:
		d := &Dict{}
		for i := range n.keys {
			k, err := r.eval(n.keys[i], s)
			if err != nil {
				return nil, err
			}
			if !isHashable(k) {
				return nil, fmt.Errorf("unhashable type: '%s'", typeName(k))
			}
			v, err := r.eval(n.vals[i], s)
			if err != nil {
				return nil, err
			}
			d.Set(k, v)
		}
		return d, nil
	case *concatExpr:
		var b strings.Builder
		for _, it := range n.items {
			v, err := r.eval(it, s)
			if err != nil {
				return nil, err
			}
			b.WriteString(r.str(v))
			if err := r.chargeBytes(b.Len()); err != nil {
				return nil, err
			}
		}
		return b.String(), nil
	}
	return nil, fmt.Errorf("internal: unknown expression %T", x)
}

// plusOperands evaluates the operands of a + b + c + ..., left to right,
// appending them to vals, and says whether all are strings and their total
// length.
func (r *renderer) plusOperands(n *binExpr, s *scope, vals []any) ([]any, int, bool, error) {
	var buf [8]expr
	ops := buf[:0]
	for cur := expr(n); ; {
		b, ok := cur.(*binExpr)
		if !ok || b.op != "+" {
			ops = append(ops, cur)
			break
		}
		ops = append(ops, b.r)
		cur = b.l
	}
	total, allStrings := 0, true
	for i := len(ops) - 1; i >= 0; i-- {
		v, err := r.eval(ops[i], s)
		if err != nil {
			return vals, 0, false, err
		}
		if vs, ok := v.(string); ok {
			total += len(vs)
		} else {
			allStrings = false
		}
		vals = append(vals, v)
	}
	return vals, total, allStrings, nil
}

// sumValues folds operands with Python's +.
func (r *renderer) sumValues(vals []any) (any, error) {
	acc := vals[0]
	for _, v := range vals[1:] {
		var err error
		if acc, err = r.binop("+", acc, v); err != nil {
			return nil, err
		}
	}
	return acc, nil
}

// evalPlusChain evaluates a + b + c + ... with Python's result; a run made
// only of strings is joined into one exactly sized string instead of
// copying the growing prefix at every step.
func (r *renderer) evalPlusChain(n *binExpr, s *scope) (any, error) {
	var buf [8]any
	vals, total, allStrings, err := r.plusOperands(n, s, buf[:0])
	if err != nil {
		return nil, err
	}
	if !allStrings {
		return r.sumValues(vals)
	}
	if err := r.chargeBytes(total); err != nil {
		return nil, err
	}
	var sb strings.Builder
	sb.Grow(total)
	for _, v := range vals {
		sb.WriteString(v.(string))
	}
	return sb.String(), nil
}

func (r *renderer) evalList(xs []expr, s *scope) ([]any, error) {
	if len(xs) == 0 {
		return nil, nil
	}
	out := make([]any, len(xs))
	for i, x := range xs {
		v, err := r.eval(x, s)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (r *renderer) evalKwargs(names []string, vals []expr, s *scope) (*Dict, error) {
	if len(names) == 0 {
		return nil, nil
	}
	d := &Dict{}
	for i, n := range names {
		v, err := r.eval(vals[i], s)
		if err != nil {
			return nil, err
		}
		d.Set(n, v)
	}
	return d, nil
}

// getAttr is the sandboxed environment's getattr: Python attributes first
// (the methods of str, dict and list), then the item of that name.
func getAttr(obj any, name string) (any, error) {
	switch x := obj.(type) {
	case undefined:
		return nil, errUndefined(x)
	case *Dict:
		if isMethod(obj, name) {
			return methodAttr(obj, name), nil
		}
		if v, ok := x.Get(name); ok {
			return v, nil
		}
		return undefined{owner: "dict", attr: name}, nil
	case *Namespace:
		if v, ok := x.d.Get(name); ok {
			return v, nil
		}
		return undefined{owner: "Namespace", attr: name}, nil
	case *loopInfo:
		return x.attr(name)
	case *cycler:
		return x.attr(name), nil
	case *macro:
		// The attributes of Jinja's Macro objects.
		switch name {
		case "name":
			return x.name, nil
		case "arguments":
			args := make([]any, len(x.def.params))
			for i, p := range x.def.params {
				args[i] = p
			}
			return &List{Items: args, Tuple: true}, nil
		case "catch_kwargs":
			return x.def.kwargs, nil
		case "catch_varargs":
			return x.def.varargs, nil
		case "caller":
			return x.def.caller, nil
		}
	case *List:
		if x.group && name == "grouper" {
			return x.Items[0], nil
		}
		if x.group && name == "list" {
			return x.Items[1], nil
		}
	}
	if isMethod(obj, name) {
		return methodAttr(obj, name), nil
	}
	return undefined{owner: typeName(obj), attr: name}, nil
}

// mjAttr is minijinja's attribute lookup: a map's item of that name, and
// no methods on maps, strings or lists (pycompat's methods are only
// called: x.items() works, x.items is the item "items" or undefined).
func mjAttr(obj any, name string) (any, error) {
	switch x := obj.(type) {
	case *Dict:
		if v, ok := x.Get(name); ok {
			return v, nil
		}
		return undefined{owner: "dict", attr: name}, nil
	case string:
		return undefined{owner: "str", attr: name}, nil
	case *List:
		if !x.group {
			return undefined{owner: typeName(obj), attr: name}, nil
		}
	}
	return getAttr(obj, name)
}

// mjItem is minijinja's subscript: a map's item (undefined when it has
// none, never a method of that name), a sequence's or string's element;
// a string key on anything else is an attribute (mjAttr).
func mjItem(obj, key any) (any, error) {
	if d, ok := obj.(*Dict); ok {
		if isHashable(key) {
			if v, ok := d.Get(key); ok {
				return v, nil
			}
		}
		return undefined{name: fmt.Sprintf("'%s object' has no element %s", typeName(obj), toReprString(key))}, nil
	}
	if k, ok := key.(string); ok {
		return mjAttr(obj, k)
	}
	return getItem(obj, key)
}

// methodAttr is the method name of obj as the immutable sandbox gives it:
// a method that modifies a list or dict is an undefined value whose use
// reports the access as unsafe.
func methodAttr(obj any, name string) any {
	if !isSafeMethod(obj, name) {
		return undefined{name: fmt.Sprintf("access to attribute '%s' of '%s' object is unsafe.", name, typeName(obj))}
	}
	return &boundMethod{recv: obj, name: name}
}

// getItem is the sandboxed environment's getitem: obj[key], then the
// attribute when key is a string.
func getItem(obj, key any) (any, error) {
	switch x := obj.(type) {
	case undefined:
		return nil, errUndefined(x)
	case *Dict:
		if isHashable(key) {
			if v, ok := x.Get(key); ok {
				return v, nil
			}
		}
	case *List:
		if i, ok := intOf(key); ok {
			n := int64(len(x.Items))
			if i < 0 {
				i += n
			}
			if i >= 0 && i < n {
				return x.Items[i], nil
			}
		}
	case string:
		if i, ok := intOf(key); ok {
			if c, ok := runeAt(x, i); ok {
				return c, nil
			}
		}
	case *Namespace:
		if k, ok := key.(string); ok {
			if v, ok := x.d.Get(k); ok {
				return v, nil
			}
		}
	case *loopInfo:
		if k, ok := key.(string); ok {
			return x.attr(k)
		}
	}
	if k, ok := key.(string); ok {
		if _, isDict := obj.(*Dict); !isDict {
			return getAttr(obj, k)
		}
		if isMethod(obj, k) {
			return methodAttr(obj, k), nil
		}
	}
	return undefined{name: fmt.Sprintf("'%s object' has no element %s", typeName(obj), toReprString(key))}, nil
}

func toReprString(v any) string {
	var b strings.Builder
	writeRepr(&b, v, 0)
	return b.String()
}

func runeAt(s string, i int64) (string, bool) {
	if i >= 0 {
		// fast path for ASCII prefixes
		for pos, c := range s {
			if i == 0 {
				_ = pos
				return string(c), true
			}
			i--
		}
		return "", false
	}
	n := int64(utf8.RuneCountInString(s))
	i += n
	if i < 0 {
		return "", false
	}
	return runeAt(s, i)
}

func (r *renderer) evalSlice(n *sliceExpr, s *scope) (any, error) {
	obj, err := r.eval(n.obj, s)
	if err != nil {
		return nil, err
	}
	var bounds [3]*int64
	for i, e := range []expr{n.start, n.stop, n.step} {
		if e == nil {
			continue
		}
		v, err := r.eval(e, s)
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		iv, ok := intOf(v)
		if !ok {
			return nil, errors.New("slice indices must be integers or None")
		}
		bounds[i] = &iv
	}
	return r.slice(obj, bounds[0], bounds[1], bounds[2])
}

// sliceIndices is Python's slice.indices.
func sliceIndices(length int64, start, stop, step *int64) (int64, int64, int64, error) {
	st := int64(1)
	if step != nil {
		st = *step
	}
	if st == 0 {
		return 0, 0, 0, errors.New("slice step cannot be zero")
	}
	lower, upper := int64(0), length
	if st < 0 {
		lower, upper = -1, length-1
	}
	clamp := func(p *int64, def int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += length
			if v < lower {
				v = lower
			}
		} else if v > upper {
			v = upper
		}
		return v
	}
	if st > 0 {
		return clamp(start, lower), clamp(stop, upper), st, nil
	}
	return clamp(start, upper), clamp(stop, lower), st, nil
}

// mjNegSliceBounds are minijinja's bounds of a slice with a negative step:
// a negative bound counts from the end, a start before the beginning is
// the first item (not nothing, as in Python), and a stop that falls on or
// before the first item includes it, so l[2:0:-1] and l[2:-len(l):-1]
// end with l[0] where Python stops before it.
func mjNegSliceBounds(length int64, start, stop *int64) (b, e int64) {
	b, e = length-1, -1
	if start != nil {
		b = *start
		if b < 0 {
			b = max(b+length, 0)
		}
		b = min(b, length-1)
	}
	if stop != nil {
		e = *stop
		if e < 0 {
			e += length
		}
		if e <= 0 {
			e = -1
		}
		e = min(e, length-1)
	}
	return b, e
}

func (r *renderer) slice(obj any, start, stop, step *int64) (any, error) {
	if r.dynamo && step != nil && *step == 0 {
		// minijinja checks the step before the value: slicing even none
		// or undefined by 0 is an error.
		return nil, errors.New("cannot slice by step size of 0")
	}
	var items []any
	var runes []rune
	var length int64
	// Jinja compiles slices to a plain Python subscript (not the
	// environment's lenient getitem), so a bad one is an error.
	switch x := obj.(type) {
	case *List:
		items = x.Items
		length = int64(len(items))
	case string:
		runes = []rune(x)
		length = int64(len(runes))
	case undefined:
		if r.dynamo {
			return &List{}, nil // minijinja slices undefined to an empty list
		}
		return nil, errUndefined(x)
	case nil:
		if r.dynamo {
			return &List{}, nil // minijinja slices none to an empty list
		}
		return nil, fmt.Errorf("'%s' object is not subscriptable", typeName(obj))
	default:
		return nil, fmt.Errorf("'%s' object is not subscriptable", typeName(obj))
	}
	b, e, st, err := sliceIndices(length, start, stop, step)
	if err != nil {
		return nil, err
	}
	// With a positive step minijinja (since 2.12) clamps its bounds as
	// Python does; with a negative one it has bounds of its own.
	if r.dynamo && st < 0 {
		b, e = mjNegSliceBounds(length, start, stop)
	}
	if err := r.step(length); err != nil {
		return nil, err
	}
	if runes != nil || obj == "" {
		var sb strings.Builder
		for i := b; st > 0 && i < e || st < 0 && i > e; i += st {
			sb.WriteRune(runes[i])
		}
		return sb.String(), nil
	}
	out := []any{}
	for i := b; st > 0 && i < e || st < 0 && i > e; i += st {
		out = append(out, items[i])
	}
	return &List{Items: out, Tuple: obj.(*List).Tuple}, nil
}

// containerLen is the number of items of a list or dict, 0 for anything
// else.
func containerLen(v any) int {
	switch x := v.(type) {
	case *List:
		return len(x.Items)
	case *Dict:
		return x.Len()
	}
	return 0
}

func (r *renderer) cmpop(op string, l, rv any) (bool, error) {
	switch op {
	case "==", "!=":
		// Comparing two lists or dicts walks them: paid by the size of
		// the smaller (the walk stops at the first difference or its end).
		if n := min(containerLen(l), containerLen(rv)); n > 0 {
			if err := r.step(int64(n)); err != nil {
				return false, err
			}
		}
		return r.equal(l, rv) == (op == "=="), nil
	case "in":
		return r.contains(rv, l)
	case "notin":
		ok, err := r.contains(rv, l)
		return !ok, err
	}
	var c int
	var err error
	if r.dynamo {
		c, err = mjCompare(l, rv, 0)
	} else {
		if u, ok := l.(undefined); ok {
			return false, errUndefined(u)
		}
		if u, ok := rv.(undefined); ok {
			return false, errUndefined(u)
		}
		c, err = compare(l, rv)
	}
	if err != nil {
		return false, fmt.Errorf("'%s' not supported between instances of '%s' and '%s'", op, typeName(l), typeName(rv))
	}
	switch op {
	case "<":
		return c < 0, nil
	case ">":
		return c > 0, nil
	case "<=":
		return c <= 0, nil
	default:
		return c >= 0, nil
	}
}

func (r *renderer) contains(container, item any) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok && r.dynamo {
			s, ok = r.str(item), true // minijinja looks for the needle's text (undefined's is "")
		}
		if !ok {
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		if err := r.step(int64(len(c)>>6) + 1); err != nil {
			return false, err
		}
		return strings.Contains(c, s), nil
	case *List:
		if err := r.step(int64(len(c.Items))); err != nil {
			return false, err
		}
		for _, it := range c.Items {
			if r.equal(it, item) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		if _, isU := item.(undefined); isU {
			return false, nil
		}
		if !isHashable(item) {
			if r.dynamo {
				// minijinja looks any value up among a map's keys; a list
				// or a map is never one of a JSON object's (string) keys.
				return false, nil
			}
			return false, fmt.Errorf("unhashable type: '%s'", typeName(item))
		}
		_, ok := c.Get(item)
		return ok, nil
	case *Namespace:
		_, ok := c.d.Get(item)
		return ok, nil
	case undefined:
		return false, nil
	}
	return false, fmt.Errorf("argument of type '%s' is not iterable", typeName(container))
}

func (r *renderer) binop(op string, l, rv any) (any, error) {
	if f, ok := l.(string); ok && op == "%" {
		if r.dynamo {
			// minijinja has no printf-style formatting.
			return nil, fmt.Errorf("tried to use %% operator on unsupported types %s and %s", typeName(l), typeName(rv))
		}
		return r.percentFormat(f, rv)
	}
	if u, ok := l.(undefined); ok {
		return nil, errUndefined(u)
	}
	if u, ok := rv.(undefined); ok {
		return nil, errUndefined(u)
	}
	li, lInt := intOf(l)
	ri, rInt := intOf(rv)
	lf, lNum := asNumber(l)
	rf, rNum := asNumber(rv)
	bad := func() error {
		return fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(rv))
	}
	if r.dynamo && lNum && rNum {
		if v, ok, err := mjArith(op, li, ri, lf, rf, lInt && rInt); ok {
			return v, err
		}
	}
	switch op {
	case "+":
		switch {
		case lInt && rInt:
			s := li + ri
			if (s > li) != (ri > 0) {
				return nil, errors.New("integer overflow")
			}
			return s, nil
		case lNum && rNum:
			return lf + rf, nil
		}
		switch x := l.(type) {
		case string:
			y, ok := rv.(string)
			if !ok {
				return nil, fmt.Errorf("can only concatenate str (not \"%s\") to str", typeName(rv))
			}
			if err := r.chargeBytes(len(x) + len(y)); err != nil {
				return nil, err
			}
			return x + y, nil
		case *List:
			// Python adds a list to a list and a tuple to a tuple only;
			// minijinja has no tuples (a tuple literal is a list), so
			// there any two sequences concatenate.
			y, ok := rv.(*List)
			if !ok || x.Tuple != y.Tuple && !r.dynamo {
				return nil, bad()
			}
			if err := r.chargeItems(len(x.Items) + len(y.Items)); err != nil {
				return nil, err
			}
			out := make([]any, 0, len(x.Items)+len(y.Items))
			out = append(out, x.Items...)
			out = append(out, y.Items...)
			return &List{Items: out, Tuple: x.Tuple && y.Tuple}, nil
		}
		return nil, bad()
	case "-":
		switch {
		case lInt && rInt:
			d := li - ri
			if (d < li) != (ri > 0) {
				return nil, errors.New("integer overflow")
			}
			return d, nil
		case lNum && rNum:
			return lf - rf, nil
		}
		return nil, bad()
	case "*":
		switch {
		case lInt && rInt:
			if li != 0 && ri != 0 {
				p := li * ri
				if p/ri != li || (li == -1 && ri == math.MinInt64) || (ri == -1 && li == math.MinInt64) {
					return nil, errors.New("integer overflow")
				}
				return p, nil
			}
			return int64(0), nil
		case lNum && rNum:
			return lf * rf, nil
		}
		if n, ok := intOf(rv); ok {
			return r.repeat(l, n, bad)
		}
		if n, ok := intOf(l); ok {
			return r.repeat(rv, n, bad)
		}
		return nil, bad()
	case "/":
		if !lNum || !rNum {
			return nil, bad()
		}
		if rf == 0 {
			return nil, errors.New("division by zero")
		}
		return lf / rf, nil
	case "//", "%":
		if op == "%" {
			if f, ok := l.(string); ok {
				return r.percentFormat(f, rv)
			}
		}
		if !lNum || !rNum {
			return nil, bad()
		}
		if lInt && rInt {
			if ri == 0 {
				return nil, errors.New("integer division or modulo by zero")
			}
			if op == "//" && li == math.MinInt64 && ri == -1 {
				return nil, errors.New("integer overflow") // 2**63 is not a 64-bit integer
			}
			q, m := li/ri, li%ri
			if m != 0 && (m < 0) != (ri < 0) {
				q--
				m += ri
			}
			if op == "//" {
				return q, nil
			}
			return m, nil
		}
		if rf == 0 {
			return nil, errors.New("float division by zero")
		}
		q, m := pyFloatDivmod(lf, rf)
		if op == "//" {
			return q, nil
		}
		return m, nil
	case "**":
		if !lNum || !rNum {
			return nil, bad()
		}
		if lInt && rInt && ri >= 0 {
			res := int64(1)
			base := li
			for e := ri; e > 0; e-- {
				if err := r.step(1); err != nil {
					return nil, err
				}
				n := res * base
				if base != 0 && n/base != res {
					return nil, errors.New("integer overflow")
				}
				res = n
				if res == 0 || res == 1 && base == 1 {
					break
				}
			}
			return res, nil
		}
		return math.Pow(lf, rf), nil
	}
	return nil, fmt.Errorf("unknown operator %s", op)
}

func (r *renderer) repeat(v any, n int64, bad func() error) (any, error) {
	if _, isStr := v.(string); isStr && n < 0 && r.dynamo {
		// minijinja repeats a string a usize of times: a negative count
		// is an error (Python's is the empty string).
		return nil, errors.New("strings can only be multiplied with integers")
	}
	if n < 0 {
		n = 0
	}
	switch x := v.(type) {
	case string:
		if int64(len(x))*n > int64(r.maxOutput) || n > int64(r.maxOutput) {
			return nil, r.overflow()
		}
		if err := r.chargeBytes(len(x) * int(n)); err != nil {
			return nil, err
		}
		return strings.Repeat(x, int(n)), nil
	case *List:
		total := int64(len(x.Items)) * n
		if n > 0 && total/n != int64(len(x.Items)) || total > int64(r.maxOutput) {
			return nil, fmt.Errorf("%w: list longer than %d items", ErrRenderUnavailable, r.maxOutput)
		}
		if err := r.chargeItems(int(total)); err != nil {
			return nil, err
		}
		out := make([]any, 0, total)
		for range n {
			out = append(out, x.Items...)
		}
		return &List{Items: out, Tuple: x.Tuple}, nil
	}
	return nil, bad()
}

func (r *renderer) evalCall(n *callExpr, s *scope, caller *macro) (any, error) {
	// Method calls are resolved without building a bound method.
	var fn any
	var err error
	if a, ok := n.fn.(*attrExpr); ok {
		obj, err := r.eval(a.obj, s)
		if err != nil {
			return nil, err
		}
		// minijinja calls a map's item of that name first, and pycompat's
		// method only when there is none: x.items() on a map with an
		// "items" key is that value called (an error when it is not
		// callable, as in Dynamo's frontend).
		var item bool
		if d, isDict := obj.(*Dict); isDict && r.dynamo {
			fn, item = d.Get(a.name)
		}
		switch {
		case item:
		case isMethod(obj, a.name):
			args, kw, err := r.callArgs(n, s)
			if err != nil {
				return nil, err
			}
			return r.callMethod(obj, a.name, args, kw)
		default:
			if fn, err = getAttr(obj, a.name); err != nil {
				return nil, err
			}
		}
	} else if fn, err = r.eval(n.fn, s); err != nil {
		return nil, err
	}
	args, kw, err := r.callArgs(n, s)
	if err != nil {
		return nil, err
	}
	return r.call(fn, args, kw, caller)
}

// callArgs evaluates a call's positional and keyword arguments.
func (r *renderer) callArgs(n *callExpr, s *scope) ([]any, *Dict, error) {
	args, err := r.evalList(n.args, s)
	if err != nil {
		return nil, nil, err
	}
	kw, err := r.evalKwargs(n.kwName, n.kwVal, s)
	return args, kw, err
}

func (r *renderer) call(fn any, args []any, kw *Dict, caller *macro) (any, error) {
	switch f := fn.(type) {
	case *macro:
		return r.callMacro(f, args, kw, caller)
	case *builtin:
		return f.fn(r, args, kw)
	case *boundMethod:
		return r.callMethod(f.recv, f.name, args, kw)
	case undefined:
		return nil, errUndefined(f)
	case *loopInfo:
		if f.recurse == nil {
			return nil, errors.New("the loop must have the 'recursive' marker to be called recursively")
		}
		if len(args) != 1 || kw != nil && kw.Len() > 0 {
			return nil, fmt.Errorf("loop() takes 1 positional argument but %d were given", len(args))
		}
		return f.recurse(args[0])
	}
	return nil, fmt.Errorf("'%s' object is not callable", typeName(fn))
}

func (r *renderer) callMacro(m *macro, args []any, kw *Dict, caller *macro) (any, error) {
	r.depth++
	defer func() { r.depth-- }()
	if r.depth > maxCallDepth {
		return nil, fmt.Errorf("%w: macro recursion deeper than %d", ErrRenderUnavailable, maxCallDepth)
	}
	d := m.def
	// Jinja gives a macro whose body reads varargs or kwargs the extra
	// arguments there; minijinja has no such names (its macro call refuses
	// extra positional arguments and unknown keywords: "too many
	// arguments"), so in the Dynamo mode they are ordinary variables.
	takesVarargs, takesKwargs := d.varargs && !r.dynamo, d.kwargs && !r.dynamo
	if len(args) > len(d.params) && !takesVarargs {
		return nil, fmt.Errorf("macro '%s' takes not more than %d argument(s)", m.name, len(d.params))
	}
	inner := &scope{parent: m.closure}
	// Keyword arguments fill the parameters past the positional ones; any
	// other keyword (one naming a parameter already given by position
	// included) is an error unless the macro reads kwargs, which then holds
	// them.
	used := 0
	bind := func(i int) error {
		p := d.params[i]
		var given any
		isGiven := false
		if i < len(args) {
			given, isGiven = args[i], true
		} else if v, ok := kw.Get(p); ok {
			given, isGiven = v, true
			used++
		}
		if isGiven {
			// minijinja evaluates a parameter's default whenever its
			// value is undefined, an undefined argument included;
			// Jinja2 only when no argument is given.
			if _, undef := given.(undefined); !undef || !r.dynamo || d.defaults[i] == nil {
				inner.set(p, given)
				return nil
			}
		}
		if d.defaults[i] != nil {
			v, err := r.eval(d.defaults[i], inner)
			if err != nil {
				return err
			}
			inner.set(p, v)
		} else {
			inner.set(p, undefined{name: "'" + p + "' is undefined"})
		}
		return nil
	}
	if r.dynamo {
		// minijinja binds a macro's parameters from the last to the first
		// (compile_macro_expression walks args.iter().rev()), evaluating
		// each default when the parameters after it are bound and those
		// before it are not: in m(a, b=a) b's default sees no a, in
		// m(a=b, b=2) a's default sees b. A parameter is no closure
		// variable to minijinja, so an unbound one reads as the render's
		// variable of that name, else the global, else undefined; never a
		// variable the template set.
		for _, p := range d.params {
			v, ok := r.top.parent.lookup(p)
			if !ok {
				if v, ok = r.global(p); !ok {
					v = undefined{name: "'" + p + "' is undefined"}
				}
			}
			inner.set(p, v)
		}
		for i := len(d.params) - 1; i >= 0; i-- {
			if err := bind(i); err != nil {
				return nil, err
			}
		}
	} else {
		for i := range d.params {
			if err := bind(i); err != nil {
				return nil, err
			}
		}
	}
	if kw != nil && kw.Len() > used {
		extra := &Dict{}
		for i, k := range kw.keys {
			ks, _ := k.(string)
			if ks == "caller" || slices.Index(d.params, ks) >= len(args) {
				continue
			}
			if !takesKwargs {
				return nil, fmt.Errorf("macro '%s' takes no keyword argument '%s'", m.name, ks)
			}
			extra.Set(k, kw.vals[i])
		}
		if takesKwargs {
			inner.set("kwargs", extra)
		}
	} else if takesKwargs {
		inner.set("kwargs", &Dict{})
	}
	if takesVarargs {
		var rest []any
		if len(args) > len(d.params) {
			rest = append(rest, args[len(d.params):]...)
		}
		inner.set("varargs", &List{Items: orEmptyAny(rest), Tuple: true})
	}
	if caller != nil {
		inner.set("caller", caller)
	}
	o := &output{}
	if _, err := r.execBody(d.body, inner, o); err != nil {
		return nil, err
	}
	return o.b.String(), nil
}

func (li *loopInfo) attr(name string) (any, error) {
	switch name {
	case "length", "revindex", "revindex0":
		if err := li.fill(-1); err != nil {
			return nil, err
		}
	case "last", "nextitem":
		if err := li.fill(li.i + 1); err != nil {
			return nil, err
		}
	}
	n := int64(len(li.items))
	i := int64(li.i)
	switch name {
	case "index":
		return i + 1, nil
	case "index0":
		return i, nil
	case "revindex":
		return n - i, nil
	case "revindex0":
		return n - i - 1, nil
	case "first":
		return i == 0, nil
	case "last":
		return i == n-1, nil
	case "length":
		return n, nil
	case "depth":
		return int64(li.depth), nil
	case "depth0":
		return int64(li.depth - 1), nil
	case "previtem":
		if i == 0 {
			return undefined{name: "there is no previous item"}, nil
		}
		return li.items[i-1], nil
	case "nextitem":
		if i == n-1 {
			return undefined{name: "there is no next item"}, nil
		}
		return li.items[i+1], nil
	case "cycle":
		return &builtin{name: "cycle", fn: func(_ *renderer, args []any, _ *Dict) (any, error) {
			if len(args) == 0 {
				return nil, errors.New("no items for cycling given")
			}
			return args[li.i%len(args)], nil
		}}, nil
	case "changed":
		// True at the first call and whenever the arguments differ from
		// those of the previous call.
		return &builtin{name: "changed", fn: func(_ *renderer, args []any, _ *Dict) (any, error) {
			cur := &List{Items: args, Tuple: true}
			if li.lastChanged != nil && equal(li.lastChanged, cur) {
				return false, nil
			}
			li.lastChanged = cur
			return true, nil
		}}, nil
	}
	return undefined{owner: "LoopContext", attr: name}, nil
}

// attr is an attribute of a cycler: current, next() (current, then the
// cycler moves on) and reset().
func (c *cycler) attr(name string) any {
	switch name {
	case "current":
		return c.items[c.pos]
	case "items":
		return &List{Items: c.items, Tuple: true}
	case "next":
		return &builtin{name: "next", fn: func(*renderer, []any, *Dict) (any, error) {
			v := c.items[c.pos]
			c.pos = (c.pos + 1) % len(c.items)
			return v, nil
		}}
	case "reset":
		return &builtin{name: "reset", fn: func(*renderer, []any, *Dict) (any, error) {
			c.pos = 0
			return nil, nil
		}}
	}
	return undefined{owner: "Cycler", attr: name}
}

// mjArith is minijinja's arithmetic where it parts from Python's (ok
// false: as Python's): integer // and % are Euclidean (7 // -2 is -3,
// 7 % -3 is 1) and fail by zero; a float // is Euclidean and a float %
// truncated (-7.5 % 2 is -1.5), by zero inf and NaN; / by zero is inf or
// NaN; an integer to a negative integer power fails.
func mjArith(op string, li, ri int64, lf, rf float64, ints bool) (any, bool, error) {
	switch op {
	case "/":
		return lf / rf, true, nil
	case "//", "%":
		if !ints {
			if op == "%" {
				return math.Mod(lf, rf), true, nil
			}
			q := math.Trunc(lf / rf)
			if math.Mod(lf, rf) < 0 {
				if rf > 0 {
					q--
				} else {
					q++
				}
			}
			return q, true, nil
		}
		if ri == 0 || (li == math.MinInt64 && ri == -1) {
			return nil, true, fmt.Errorf("unable to calculate %d %s %d", li, op, ri)
		}
		q, m := li/ri, li%ri
		if m < 0 {
			if ri > 0 {
				q, m = q-1, m+ri
			} else {
				q, m = q+1, m-ri
			}
		}
		if op == "//" {
			return q, true, nil
		}
		return m, true, nil
	case "**":
		if ints && ri < 0 {
			return nil, true, fmt.Errorf("unable to calculate %d ** %d", li, ri)
		}
	}
	return nil, false, nil
}

// equal is == in the renderer's engine (mjEqual as Dynamo's frontend).
func (r *renderer) equal(a, b any) bool {
	if r.dynamo {
		return mjEqual(a, b)
	}
	return equal(a, b)
}

// compare orders two values in the renderer's engine (mjCompare, which
// orders across kinds, as Dynamo's frontend).
func (r *renderer) compare(a, b any) (int, error) {
	if r.dynamo {
		return mjCompare(a, b, 0)
	}
	return compare(a, b)
}

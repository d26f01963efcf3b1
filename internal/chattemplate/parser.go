package chattemplate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Expression nodes.
type (
	expr any

	constExpr struct{ v any }
	nameExpr  struct{ name string }
	attrExpr  struct {
		obj  expr
		name string
	}
	itemExpr  struct{ obj, key expr }
	sliceExpr struct {
		obj               expr
		start, stop, step expr // nil when absent
	}
	callExpr struct {
		fn     expr
		args   []expr
		kwName []string
		kwVal  []expr
	}
	filterExpr struct {
		node   expr // nil inside a filter block
		name   string
		args   []expr
		kwName []string
		kwVal  []expr
	}
	testExpr struct {
		node   expr
		name   string
		args   []expr
		negate bool
	}
	binExpr struct {
		op   string
		l, r expr
	}
	unaryExpr struct {
		op string // not, -, +
		x  expr
	}
	cmpExpr struct {
		first expr
		ops   []string
		rest  []expr
	}
	andExpr  struct{ l, r expr }
	orExpr   struct{ l, r expr }
	condExpr struct{ test, a, b expr }
	listExpr struct {
		items []expr
		tuple bool
	}
	dictExpr   struct{ keys, vals []expr }
	concatExpr struct{ items []expr }
)

// Statement nodes.
type (
	stmt any

	dataStmt  struct{ text string }
	printStmt struct {
		x    expr
		line int
	}
	ifStmt struct {
		conds  []expr
		bodies [][]stmt
		els    []stmt
	}
	forStmt struct {
		targets []string
		unpack  bool
		tree    *target // nested tuple targets
		iter    expr
		cond    expr
		// recursive: the body may call loop(items) to run the loop again
		// over items, one level deeper.
		recursive bool
		body      []stmt
		els       []stmt
		line      int
	}
	setStmt struct {
		targets []string
		unpack  bool
		tree    *target // nested tuple targets
		nsAttr  string  // set ns.attr = ...: targets[0] is the namespace
		x       expr
		line    int
	}
	setBlockStmt struct {
		target  string
		filters []*filterExpr
		body    []stmt
	}
	macroStmt       struct{ m *macroDef }
	breakStmt       struct{}
	contStmt        struct{}
	filterBlockStmt struct {
		filters []*filterExpr
		body    []stmt
	}
	withStmt struct {
		names []string
		vals  []expr
		body  []stmt
	}
	// blockStmt is {% block %} in a template without a parent: its body
	// renders where it stands, seeing the template's top-level names (and,
	// when scoped, the enclosing ones too).
	blockStmt struct {
		name     string
		scoped   bool
		required bool
		body     []stmt
		line     int
	}
	// loadStmt is a tag that loads another template (include, import,
	// from, extends). Templates have no loader, so it fails where it
	// runs, not where it is written: a template naming one on a path no
	// request takes renders, as in Jinja and minijinja, whose parsers take
	// these tags and whose renderers fail at them.
	loadStmt struct {
		tag           string
		name          expr
		ignoreMissing bool
		line          int
	}
	callBlockStmt struct {
		call   *callExpr
		params []string
		defs   []expr
		body   []stmt
	}
)

type macroDef struct {
	name     string
	params   []string
	defaults []expr // nil entries: no default
	body     []stmt
	// varargs and kwargs: the body reads the name, so the macro takes
	// extra positional arguments (as the tuple varargs) or extra keyword
	// arguments (as the dict kwargs), as Jinja decides from the body.
	varargs, kwargs bool
	// caller: the body reads caller (the macro's caller attribute).
	caller bool
}

type parser struct {
	toks  []token
	pos   int
	depth int
	// loops counts the for bodies around the current position (macro and
	// call bodies start again from zero): break and continue need one, as
	// the Python code Jinja compiles to does.
	loops int
	// blocks holds the block names seen, which must be unique.
	blocks map[string]bool
	// minijinja parses unary operators as minijinja does (Dynamo's
	// frontend): see parseUnary.
	minijinja bool
}

func (p *parser) peek() token { return p.toks[p.pos] }
func (p *parser) next() token {
	t := p.toks[p.pos]
	if t.kind != tkEOF {
		p.pos++
	}
	return t
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("line %d: %s", p.peek().line, fmt.Sprintf(format, args...))
}

func (p *parser) isOp(op string) bool {
	t := p.peek()
	return t.kind == tkOp && t.val == op
}

func (p *parser) isName(n string) bool {
	t := p.peek()
	return t.kind == tkName && t.val == n
}

func (p *parser) skipOp(op string) bool {
	if p.isOp(op) {
		p.pos++
		return true
	}
	return false
}

func (p *parser) skipName(n string) bool {
	if p.isName(n) {
		p.pos++
		return true
	}
	return false
}

func (p *parser) expectOp(op string) error {
	if !p.skipOp(op) {
		return p.errorf("expected %q, got %s", op, p.peek())
	}
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.peek()
	if t.kind != tkName {
		return "", p.errorf("expected a name, got %s", t)
	}
	p.pos++
	return t.val, nil
}

func (p *parser) expectKind(k tokKind) error {
	if p.peek().kind != k {
		return p.errorf("unexpected %s", p.peek())
	}
	p.pos++
	return nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxNesting {
		return p.errorf("template nested too deeply")
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// chain charges one level of nesting for each link of a left-deep chain
// (a + b + c, x.y.z, v|f|g); done gives the levels back.
func (p *parser) chain(links *int) error {
	*links++
	return p.enter()
}

func (p *parser) done(links int) { p.depth -= links }

// parse parses the whole template; minijinja parses unary operators as
// minijinja does.
func parse(toks []token, minijinja bool) ([]stmt, error) {
	p := &parser{toks: toks, minijinja: minijinja}
	body, end, err := p.subparse(nil)
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.errorf("unexpected '%s'", end)
	}
	return body, nil
}

// subparse parses statements until a block tag whose name is in ends (the
// tag name is consumed and returned, positioned after it) or the end.
func (p *parser) subparse(ends []string) ([]stmt, string, error) {
	if err := p.enter(); err != nil {
		return nil, "", err
	}
	defer p.leave()
	var body []stmt
	for {
		t := p.peek()
		switch t.kind {
		case tkEOF:
			if len(ends) > 0 {
				return nil, "", p.errorf("unexpected end of template, expected '%s'", ends[0])
			}
			return body, "", nil
		case tkData:
			p.pos++
			body = append(body, &dataStmt{text: t.val})
		case tkVarBegin:
			p.pos++
			x, err := p.parseTupleOrExpr()
			if err != nil {
				return nil, "", err
			}
			if err := p.expectKind(tkVarEnd); err != nil {
				return nil, "", err
			}
			body = append(body, &printStmt{x: x, line: t.line})
		case tkBlockBegin:
			p.pos++
			nt := p.peek()
			if nt.kind != tkName {
				return nil, "", p.errorf("tag name expected")
			}
			for _, e := range ends {
				if nt.val == e {
					p.pos++
					return body, e, nil
				}
			}
			s, err := p.parseStatement()
			if err != nil {
				return nil, "", err
			}
			if s != nil {
				body = append(body, s)
			}
		default:
			return nil, "", p.errorf("unexpected %s", t)
		}
	}
}

func (p *parser) endTag() error { return p.expectKind(tkBlockEnd) }

func (p *parser) parseStatement() (stmt, error) {
	t := p.next()
	switch t.val {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor(t.line)
	case "set":
		return p.parseSet(t.line)
	case "macro":
		return p.parseMacro()
	case "break", "continue":
		if p.loops == 0 {
			return nil, fmt.Errorf("line %d: '%s' outside loop", t.line, t.val)
		}
		if err := p.endTag(); err != nil {
			return nil, err
		}
		if t.val == "break" {
			return &breakStmt{}, nil
		}
		return &contStmt{}, nil
	case "filter":
		fs, err := p.parseFilterChain()
		if err != nil {
			return nil, err
		}
		if err := p.endTag(); err != nil {
			return nil, err
		}
		body, _, err := p.subparse([]string{"endfilter"})
		if err != nil {
			return nil, err
		}
		return &filterBlockStmt{filters: fs, body: body}, p.endTag()
	case "with":
		w := &withStmt{}
		for !p.isOp("") && p.peek().kind != tkBlockEnd {
			if len(w.names) > 0 {
				if err := p.expectOp(","); err != nil {
					return nil, err
				}
			}
			n, err := p.expectName()
			if err != nil {
				return nil, err
			}
			if err := p.expectOp("="); err != nil {
				return nil, err
			}
			x, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			w.names = append(w.names, n)
			w.vals = append(w.vals, x)
		}
		if err := p.endTag(); err != nil {
			return nil, err
		}
		body, _, err := p.subparse([]string{"endwith"})
		if err != nil {
			return nil, err
		}
		w.body = body
		return w, p.endTag()
	case "generation":
		// transformers' AssistantTracker: the body renders as is.
		if err := p.endTag(); err != nil {
			return nil, err
		}
		body, _, err := p.subparse([]string{"endgeneration"})
		if err != nil {
			return nil, err
		}
		return &withStmt{body: body}, p.endTag()
	case "call":
		return p.parseCallBlock()
	case "block":
		return p.parseBlock(t.line)
	case "include", "import", "from", "extends":
		return p.parseLoad(t)
	}
	return nil, fmt.Errorf("line %d: encountered unknown tag '%s'", t.line, t.val)
}

// parseLoad parses the rest of an include, import, from or extends tag:
// {% include NAME [ignore missing] [with context|without context] %},
// {% import NAME as ALIAS [with context|without context] %},
// {% from NAME import A [as B], ... [with context|without context] %},
// {% extends NAME %}.
func (p *parser) parseLoad(t token) (stmt, error) {
	name, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	st := &loadStmt{tag: t.val, name: name, line: t.line}
	switch t.val {
	case "include":
		if p.skipName("ignore") {
			if !p.skipName("missing") {
				return nil, p.errorf("expected 'missing' after 'ignore'")
			}
			st.ignoreMissing = true
		}
	case "import":
		if !p.skipName("as") {
			return nil, p.errorf("expected 'as' in import")
		}
		if _, err := p.expectName(); err != nil {
			return nil, err
		}
	case "from":
		if !p.skipName("import") {
			return nil, p.errorf("expected 'import' in from")
		}
		for !p.isName("with") && !p.isName("without") {
			if _, err := p.expectName(); err != nil {
				return nil, err
			}
			if p.skipName("as") {
				if _, err := p.expectName(); err != nil {
					return nil, err
				}
			}
			if !p.skipOp(",") {
				break
			}
		}
	}
	if t.val != "extends" && (p.skipName("with") || p.skipName("without")) {
		if !p.skipName("context") {
			return nil, p.errorf("expected 'context'")
		}
	}
	return st, p.endTag()
}

func (p *parser) parseBlock(line int) (stmt, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	if p.blocks[name] {
		return nil, p.errorf("block '%s' defined twice", name)
	}
	if p.blocks == nil {
		p.blocks = map[string]bool{}
	}
	p.blocks[name] = true
	b := &blockStmt{name: name, line: line}
	b.scoped = p.skipName("scoped")
	b.required = p.skipName("required")
	if err := p.endTag(); err != nil {
		return nil, err
	}
	// A block body is a function of its own: break and continue do not
	// reach a loop around it.
	loops := p.loops
	p.loops = 0
	b.body, _, err = p.subparse([]string{"endblock"})
	p.loops = loops
	if err != nil {
		return nil, err
	}
	if p.peek().kind == tkName && p.peek().val == name {
		p.pos++
	}
	if b.required && !onlyWhitespace(b.body) {
		return nil, p.errorf("required blocks can only contain comments or whitespace")
	}
	return b, p.endTag()
}

// onlyWhitespace reports whether body is text made of whitespace only.
func onlyWhitespace(body []stmt) bool {
	for _, st := range body {
		d, ok := st.(*dataStmt)
		if !ok || strings.TrimFunc(d.text, pyIsSpace) != "" {
			return false
		}
	}
	return true
}

func (p *parser) parseIf() (stmt, error) {
	s := &ifStmt{}
	for {
		c, err := p.parseTupleOrExpr()
		if err != nil {
			return nil, err
		}
		if err := p.endTag(); err != nil {
			return nil, err
		}
		body, end, err := p.subparse([]string{"elif", "else", "endif"})
		if err != nil {
			return nil, err
		}
		s.conds = append(s.conds, c)
		s.bodies = append(s.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.endTag(); err != nil {
				return nil, err
			}
			els, _, err := p.subparse([]string{"endif"})
			if err != nil {
				return nil, err
			}
			s.els = els
		}
		return s, p.endTag()
	}
}

// target is an assignment target: a name, or a tuple of targets to
// unpack a value into.
type target struct {
	name  string
	items []*target
}

// parseTargets reads the targets of a for loop or a set: names separated
// by commas, each of them possibly a parenthesized tuple of targets. names
// holds the top-level names and unpack says whether they form a tuple;
// tree is set instead when a tuple nests in another.
func (p *parser) parseTargets() (names []string, unpack bool, tree *target, err error) {
	top, err := p.parseTargetTuple(false)
	if err != nil {
		return nil, false, nil, err
	}
	if top.name != "" {
		return []string{top.name}, false, nil, nil
	}
	for _, t := range top.items {
		if t.name == "" {
			return nil, true, top, nil
		}
		names = append(names, t.name)
	}
	return names, true, nil, nil
}

// parseTargetTuple reads comma-separated targets up to "in", "=" or, in
// parentheses, ")"; one target without a comma is that target itself.
func (p *parser) parseTargetTuple(inParens bool) (*target, error) {
	var items []*target
	comma := false
	for {
		var t *target
		if p.skipOp("(") {
			inner, err := p.parseTargetTuple(true)
			if err != nil {
				return nil, err
			}
			if err := p.expectOp(")"); err != nil {
				return nil, err
			}
			t = inner
		} else {
			n, err := p.expectName()
			if err != nil {
				return nil, err
			}
			t = &target{name: n}
		}
		items = append(items, t)
		if !p.skipOp(",") {
			break
		}
		comma = true
		// A trailing comma needs parentheses: at the top, Jinja reads the
		// next word ("in" included) as one more target.
		if inParens && p.isOp(")") {
			break
		}
	}
	if len(items) == 1 && !comma {
		return items[0], nil
	}
	return &target{items: items}, nil
}

func (p *parser) parseFor(line int) (stmt, error) {
	s := &forStmt{line: line}
	var err error
	if s.targets, s.unpack, s.tree, err = p.parseTargets(); err != nil {
		return nil, err
	}
	if !p.skipName("in") {
		return nil, p.errorf("expected 'in'")
	}
	if s.iter, err = p.parseTuple(false, true); err != nil {
		return nil, err
	}
	if p.skipName("if") {
		if s.cond, err = p.parseTupleOrExpr(); err != nil {
			return nil, err
		}
	}
	s.recursive = p.skipName("recursive")
	if err := p.endTag(); err != nil {
		return nil, err
	}
	p.loops++
	body, end, err := p.subparse([]string{"endfor", "else"})
	p.loops--
	if err != nil {
		return nil, err
	}
	s.body = body
	if end == "else" {
		if err := p.endTag(); err != nil {
			return nil, err
		}
		if s.els, _, err = p.subparse([]string{"endfor"}); err != nil {
			return nil, err
		}
	}
	return s, p.endTag()
}

func (p *parser) parseSet(line int) (stmt, error) {
	s := &setStmt{line: line}
	if p.isOp("(") {
		var err error
		if s.targets, s.unpack, s.tree, err = p.parseTargets(); err != nil {
			return nil, err
		}
		if !p.skipOp("=") {
			return nil, p.errorf("expected '='")
		}
		if s.x, err = p.parseTupleOrExpr(); err != nil {
			return nil, err
		}
		return s, p.endTag()
	}
	n, err := p.expectName()
	if err != nil {
		return nil, err
	}
	switch {
	case p.isOp("."):
		p.pos++
		attr, err := p.expectName()
		if err != nil {
			return nil, err
		}
		s.targets, s.nsAttr = []string{n}, attr
	case p.isOp(","):
		p.pos--
		if s.targets, s.unpack, s.tree, err = p.parseTargets(); err != nil {
			return nil, err
		}
	default:
		s.targets = []string{n}
	}
	if !p.skipOp("=") {
		if s.nsAttr != "" || s.unpack {
			return nil, p.errorf("expected '='")
		}
		b := &setBlockStmt{target: n}
		if p.skipOp("|") {
			if b.filters, err = p.parseFilterChain(); err != nil {
				return nil, err
			}
		}
		if err := p.endTag(); err != nil {
			return nil, err
		}
		if b.body, _, err = p.subparse([]string{"endset"}); err != nil {
			return nil, err
		}
		return b, p.endTag()
	}
	if s.x, err = p.parseTupleOrExpr(); err != nil {
		return nil, err
	}
	return s, p.endTag()
}

func (p *parser) parseParams() ([]string, []expr, error) {
	var names []string
	var defs []expr
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	for !p.isOp(")") {
		if len(names) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		n, err := p.expectName()
		if err != nil {
			return nil, nil, err
		}
		var d expr
		if p.skipOp("=") {
			if d, err = p.parseExpr(); err != nil {
				return nil, nil, err
			}
		} else if len(defs) > 0 && defs[len(defs)-1] != nil {
			return nil, nil, p.errorf("non-default argument follows default argument")
		}
		names = append(names, n)
		defs = append(defs, d)
	}
	p.pos++
	return names, defs, nil
}

func (p *parser) parseMacro() (stmt, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	m := &macroDef{name: name}
	if m.params, m.defaults, err = p.parseParams(); err != nil {
		return nil, err
	}
	if err := p.endTag(); err != nil {
		return nil, err
	}
	loops := p.loops
	p.loops = 0
	start := p.pos
	m.body, _, err = p.subparse([]string{"endmacro"})
	p.loops = loops
	if err != nil {
		return nil, err
	}
	m.varargs, m.kwargs = p.readsName(start, p.pos, "varargs"), p.readsName(start, p.pos, "kwargs")
	m.caller = p.readsName(start, p.pos, "caller")
	if p.peek().kind == tkName && p.peek().val == name {
		p.pos++
	}
	return &macroStmt{m: m}, p.endTag()
}

// readsName reports whether the tokens from..to read the variable name:
// the name appears other than as an attribute (after a dot) or a keyword
// argument or parameter name (before a lone "=").
func (p *parser) readsName(from, to int, name string) bool {
	for i := from; i < to && i < len(p.toks); i++ {
		t := p.toks[i]
		if t.kind != tkName || t.val != name {
			continue
		}
		if i > 0 && p.toks[i-1].kind == tkOp && p.toks[i-1].val == "." {
			continue
		}
		if i+1 < len(p.toks) && p.toks[i+1].kind == tkOp && p.toks[i+1].val == "=" {
			continue
		}
		return true
	}
	return false
}

func (p *parser) parseCallBlock() (stmt, error) {
	s := &callBlockStmt{}
	var err error
	if p.isOp("(") {
		if s.params, s.defs, err = p.parseParams(); err != nil {
			return nil, err
		}
	}
	x, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	c, ok := x.(*callExpr)
	if !ok {
		return nil, p.errorf("expected call")
	}
	s.call = c
	if err := p.endTag(); err != nil {
		return nil, err
	}
	loops := p.loops
	p.loops = 0
	s.body, _, err = p.subparse([]string{"endcall"})
	p.loops = loops
	if err != nil {
		return nil, err
	}
	return s, p.endTag()
}

func (p *parser) parseFilterChain() ([]*filterExpr, error) {
	var out []*filterExpr
	for first := true; first || p.isOp("|"); first = false {
		if !first {
			p.pos++
		}
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// Expressions.

func (p *parser) parseTupleOrExpr() (expr, error) { return p.parseTuple(false, false) }

// parseTuple parses "a, b, c" as a tuple (or a lone expression).
func (p *parser) parseTuple(simplified, noCond bool) (expr, error) {
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if !p.skipOp(",") {
				break
			}
			isTuple = true
			if p.atTupleEnd() {
				break
			}
		}
		var x expr
		var err error
		if noCond {
			x, err = p.parseOr()
		} else {
			x, err = p.parseExpr()
		}
		if err != nil {
			return nil, err
		}
		items = append(items, x)
	}
	if !isTuple {
		return items[0], nil
	}
	return &listExpr{items: items, tuple: true}, nil
}

func (p *parser) atTupleEnd() bool {
	t := p.peek()
	switch t.kind {
	case tkVarEnd, tkBlockEnd, tkEOF:
		return true
	case tkOp:
		return t.val == ")" || t.val == "]" || t.val == "}"
	case tkName:
		return t.val == "in" || t.val == "if" || t.val == "recursive"
	}
	return false
}

func (p *parser) parseExpr() (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	x, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		test, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var els expr
		if p.skipName("else") {
			if els, err = p.parseExpr(); err != nil {
				return nil, err
			}
		}
		x = &condExpr{test: test, a: x, b: els}
	}
	return x, nil
}

func (p *parser) parseOr() (expr, error) {
	x, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	links := 0
	defer func() { p.done(links) }()
	for p.skipName("or") {
		if err := p.chain(&links); err != nil {
			return nil, err
		}
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		x = &orExpr{x, r}
	}
	return x, nil
}

func (p *parser) parseAnd() (expr, error) {
	x, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	links := 0
	defer func() { p.done(links) }()
	for p.skipName("and") {
		if err := p.chain(&links); err != nil {
			return nil, err
		}
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		x = &andExpr{x, r}
	}
	return x, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.skipName("not") {
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{op: "not", x: x}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	x, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &cmpExpr{first: x}
	links := 0
	defer func() { p.done(links) }()
	for {
		if err := p.chain(&links); err != nil {
			return nil, err
		}
		t := p.peek()
		var op string
		switch {
		case t.kind == tkOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == ">" || t.val == "<=" || t.val == ">="):
			op = t.val
			p.pos++
		case t.kind == tkName && t.val == "in":
			op = "in"
			p.pos++
		case t.kind == tkName && t.val == "not" && p.toks[p.pos+1].kind == tkName && p.toks[p.pos+1].val == "in":
			op = "notin"
			p.pos += 2
		default:
			if len(c.ops) == 0 {
				return x, nil
			}
			return c, nil
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
}

func (p *parser) parseMath1() (expr, error) {
	x, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	links := 0
	defer func() { p.done(links) }()
	for p.isOp("+") || p.isOp("-") {
		if err := p.chain(&links); err != nil {
			return nil, err
		}
		op := p.next().val
		r, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		x = &binExpr{op: op, l: x, r: r}
	}
	return x, nil
}

func (p *parser) parseConcat() (expr, error) {
	x, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	if !p.isOp("~") {
		return x, nil
	}
	c := &concatExpr{items: []expr{x}}
	for p.skipOp("~") {
		r, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		c.items = append(c.items, r)
	}
	return c, nil
}

func (p *parser) parseMath2() (expr, error) {
	x, err := p.parsePow()
	if err != nil {
		return nil, err
	}
	links := 0
	defer func() { p.done(links) }()
	for p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%") {
		if err := p.chain(&links); err != nil {
			return nil, err
		}
		op := p.next().val
		r, err := p.parsePow()
		if err != nil {
			return nil, err
		}
		x = &binExpr{op: op, l: x, r: r}
	}
	return x, nil
}

func (p *parser) parsePow() (expr, error) {
	x, err := p.parseUnary(true)
	if err != nil {
		return nil, err
	}
	links := 0
	defer func() { p.done(links) }()
	for p.skipOp("**") {
		if err := p.chain(&links); err != nil {
			return nil, err
		}
		r, err := p.parseUnary(true)
		if err != nil {
			return nil, err
		}
		x = &binExpr{op: "**", l: x, r: r}
	}
	return x, nil
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var x expr
	var err error
	switch {
	case p.minijinja:
		// minijinja's parse_unary_only: only "-" is a unary operator (a
		// "+" is a syntax error) and it binds to the primary alone, so
		// the postfix and filters below apply to the negation: -x.y is
		// (-x).y, where Jinja reads -(x.y).
		if x, err = p.parseMinijinjaNeg(); err != nil {
			return nil, err
		}
	case p.isOp("-") || p.isOp("+"):
		op := p.next().val
		inner, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		x = &unaryExpr{op: op, x: inner}
	default:
		if x, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if x, err = p.parsePostfix(x); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(x)
	}
	return x, nil
}

// parseMinijinjaNeg is minijinja's parse_unary_only: any number of "-"
// before a primary, without its postfix.
func (p *parser) parseMinijinjaNeg() (expr, error) {
	if !p.isOp("-") {
		return p.parsePrimary()
	}
	p.next()
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	inner, err := p.parseMinijinjaNeg()
	if err != nil {
		return nil, err
	}
	return &unaryExpr{op: "-", x: inner}, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.next()
	switch t.kind {
	case tkName:
		switch t.val {
		case "true", "True":
			return &constExpr{true}, nil
		case "false", "False":
			return &constExpr{false}, nil
		case "none", "None":
			return &constExpr{nil}, nil
		}
		return &nameExpr{t.val}, nil
	case tkString:
		s := t.val
		for p.peek().kind == tkString {
			s += p.next().val
		}
		return &constExpr{s}, nil
	case tkInt:
		i, err := strconv.ParseInt(t.val, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: integer %s out of range", t.line, t.val)
		}
		return &constExpr{i}, nil
	case tkFloat:
		// Beyond float64's range Python's float() gives an infinity.
		f, err := strconv.ParseFloat(t.val, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, fmt.Errorf("line %d: bad float %s", t.line, t.val)
		}
		return &constExpr{f}, nil
	case tkOp:
		switch t.val {
		case "(":
			if p.skipOp(")") {
				return &listExpr{tuple: true}, nil
			}
			x, err := p.parseTupleOrExpr()
			if err != nil {
				return nil, err
			}
			return x, p.expectOp(")")
		case "[":
			l := &listExpr{}
			for !p.isOp("]") {
				if len(l.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("]") {
						break
					}
				}
				x, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, x)
			}
			p.pos++
			return l, nil
		case "{":
			d := &dictExpr{}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			p.pos++
			return d, nil
		}
	}
	p.pos--
	return nil, p.errorf("unexpected %s", t)
}

func (p *parser) parsePostfix(x expr) (expr, error) {
	links := 0
	defer func() { p.done(links) }()
	for {
		if err := p.chain(&links); err != nil {
			return nil, err
		}
		switch {
		case p.isOp("."):
			p.pos++
			t := p.next()
			switch t.kind {
			case tkName:
				x = &attrExpr{obj: x, name: t.val}
			case tkInt:
				i, _ := strconv.ParseInt(t.val, 10, 64)
				x = &itemExpr{obj: x, key: &constExpr{i}}
			default:
				p.pos--
				return nil, p.errorf("expected name or number after '.'")
			}
		case p.isOp("["):
			p.pos++
			var err error
			if x, err = p.parseSubscript(x); err != nil {
				return nil, err
			}
		case p.isOp("("):
			var err error
			if x, err = p.parseCall(x); err != nil {
				return nil, err
			}
		default:
			return x, nil
		}
	}
}

func (p *parser) parseSubscript(obj expr) (expr, error) {
	var parts [3]expr
	n := 0
	isSlice := false
	for {
		if !p.isOp(":") && !p.isOp("]") {
			x, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			parts[n] = x
		}
		if p.skipOp(":") {
			isSlice = true
			n++
			if n > 2 {
				return nil, p.errorf("too many ':' in subscript")
			}
			continue
		}
		break
	}
	if err := p.expectOp("]"); err != nil {
		return nil, err
	}
	if !isSlice {
		if parts[0] == nil {
			return nil, p.errorf("empty subscript")
		}
		return &itemExpr{obj: obj, key: parts[0]}, nil
	}
	return &sliceExpr{obj: obj, start: parts[0], stop: parts[1], step: parts[2]}, nil
}

func (p *parser) parseArgs() ([]expr, []string, []expr, error) {
	var args []expr
	var kwn []string
	var kwv []expr
	if err := p.expectOp("("); err != nil {
		return nil, nil, nil, err
	}
	for !p.isOp(")") {
		if len(args)+len(kwn) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		if p.isOp("*") || p.isOp("**") {
			return nil, nil, nil, p.errorf("*args and **kwargs are not supported")
		}
		t := p.peek()
		if t.kind == tkName && p.toks[p.pos+1].kind == tkOp && p.toks[p.pos+1].val == "=" {
			p.pos += 2
			v, err := p.parseExpr()
			if err != nil {
				return nil, nil, nil, err
			}
			kwn = append(kwn, t.val)
			kwv = append(kwv, v)
			continue
		}
		if len(kwn) > 0 {
			return nil, nil, nil, p.errorf("positional argument follows keyword argument")
		}
		v, err := p.parseExpr()
		if err != nil {
			return nil, nil, nil, err
		}
		args = append(args, v)
	}
	p.pos++
	return args, kwn, kwv, nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	args, kwn, kwv, err := p.parseArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{fn: fn, args: args, kwName: kwn, kwVal: kwv}, nil
}

func (p *parser) parseFilter(node expr) (*filterExpr, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	for p.isOp(".") {
		p.pos++
		n, err := p.expectName()
		if err != nil {
			return nil, err
		}
		name += "." + n
	}
	f := &filterExpr{node: node, name: name}
	if p.isOp("(") {
		if f.args, f.kwName, f.kwVal, err = p.parseArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (p *parser) parseFilterExpr(x expr) (expr, error) {
	links := 0
	defer func() { p.done(links) }()
	for {
		if err := p.chain(&links); err != nil {
			return nil, err
		}
		switch {
		case p.isOp("|"):
			p.pos++
			f, err := p.parseFilter(x)
			if err != nil {
				return nil, err
			}
			x = f
		case p.isName("is"):
			p.pos++
			t := &testExpr{node: x}
			t.negate = p.skipName("not")
			name, err := p.expectName()
			if err != nil {
				return nil, err
			}
			for p.isOp(".") {
				p.pos++
				n, err := p.expectName()
				if err != nil {
					return nil, err
				}
				name += "." + n
			}
			t.name = name
			nt := p.peek()
			switch {
			case p.isOp("("):
				args, kwn, _, err := p.parseArgs()
				if err != nil {
					return nil, err
				}
				if len(kwn) > 0 {
					return nil, p.errorf("keyword arguments to tests are not supported")
				}
				t.args = args
			case nt.kind == tkString || nt.kind == tkInt || nt.kind == tkFloat || p.isOp("[") || p.isOp("{") ||
				nt.kind == tkName && nt.val != "else" && nt.val != "or" && nt.val != "and" && nt.val != "if" && nt.val != "in" && nt.val != "not" && nt.val != "is",
				// minijinja also takes a bare argument that starts with a
				// sign (x is divisibleby -3), through parse_unary_only.
				p.minijinja && (p.isOp("-") || p.isOp("+")):
				var a expr
				var err error
				if p.minijinja {
					a, err = p.parseMinijinjaNeg()
				} else {
					a, err = p.parsePrimary()
				}
				if err != nil {
					return nil, err
				}
				if a, err = p.parsePostfix(a); err != nil {
					return nil, err
				}
				t.args = []expr{a}
			}
			x = t
		case p.isOp("("):
			var err error
			if x, err = p.parseCall(x); err != nil {
				return nil, err
			}
		default:
			return x, nil
		}
	}
}

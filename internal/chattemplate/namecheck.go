package chattemplate

import (
	"fmt"
	"slices"
)

// checkNames fails a template as Jinja's compiler does when it uses a
// filter or test the environment lacks: at compile time, wherever the
// template could reach it, except inside an if statement (its tests and
// branches) or a conditional expression, where Jinja waits until the
// filter or test is actually applied, so that a template can guard one
// with "is filter". A loop, macro, call, filter, with, set or block body
// starts a new frame, where the check applies again.
// With dynamo (WithDynamoFrontend) nothing is checked here: minijinja
// looks a filter or test up only when it applies it, so a template naming
// one it lacks on a path a request does not take renders.
func checkNames(body []stmt, dynamo bool) error {
	if dynamo {
		return nil
	}
	return nameCheck{}.checkStmts(body, false)
}

// nameCheck walks a template for checkNames.
type nameCheck struct{}

func (nameCheck) knownFilter(name string) bool { return slices.Contains(jinjaFilterNames, name) }

func (nameCheck) knownTest(name string) bool { return slices.Contains(jinjaTestNames, name) }

func (nc nameCheck) checkStmts(body []stmt, soft bool) error {
	for _, st := range body {
		if err := nc.checkStmt(st, soft); err != nil {
			return err
		}
	}
	return nil
}

func (nc nameCheck) checkStmt(st stmt, soft bool) error {
	switch n := st.(type) {
	case *printStmt:
		return nc.checkExpr(n.x, soft)
	case *ifStmt:
		for i, c := range n.conds {
			if err := nc.checkExpr(c, true); err != nil {
				return err
			}
			if err := nc.checkStmts(n.bodies[i], true); err != nil {
				return err
			}
		}
		return nc.checkStmts(n.els, true)
	case *forStmt:
		// The iterable is evaluated in the enclosing frame; the filter
		// condition, the body and the else block in frames of their own.
		if err := nc.checkExpr(n.iter, soft); err != nil {
			return err
		}
		if err := nc.checkExpr(n.cond, false); err != nil {
			return err
		}
		if err := nc.checkStmts(n.body, false); err != nil {
			return err
		}
		return nc.checkStmts(n.els, false)
	case *setStmt:
		return nc.checkExpr(n.x, soft)
	case *setBlockStmt:
		if err := nc.checkFilters(n.filters, false); err != nil {
			return err
		}
		return nc.checkStmts(n.body, false)
	case *filterBlockStmt:
		if err := nc.checkFilters(n.filters, false); err != nil {
			return err
		}
		return nc.checkStmts(n.body, false)
	case *macroStmt:
		if err := nc.checkExprs(n.m.defaults, false); err != nil {
			return err
		}
		return nc.checkStmts(n.m.body, false)
	case *withStmt:
		if err := nc.checkExprs(n.vals, soft); err != nil {
			return err
		}
		return nc.checkStmts(n.body, false)
	case *blockStmt:
		return nc.checkStmts(n.body, false)
	case *loadStmt:
		return nc.checkExpr(n.name, soft)
	case *callBlockStmt:
		if err := nc.checkExpr(n.call, soft); err != nil {
			return err
		}
		if err := nc.checkExprs(n.defs, false); err != nil {
			return err
		}
		return nc.checkStmts(n.body, false)
	}
	return nil
}

func (nc nameCheck) checkFilters(fs []*filterExpr, soft bool) error {
	for _, f := range fs {
		if err := nc.checkExpr(f, soft); err != nil {
			return err
		}
	}
	return nil
}

func (nc nameCheck) checkExprs(xs []expr, soft bool) error {
	for _, x := range xs {
		if err := nc.checkExpr(x, soft); err != nil {
			return err
		}
	}
	return nil
}

func (nc nameCheck) checkExpr(x expr, soft bool) error {
	switch n := x.(type) {
	case nil, *constExpr, *nameExpr:
		return nil
	case *attrExpr:
		return nc.checkExpr(n.obj, soft)
	case *itemExpr:
		return nc.checkExprs([]expr{n.obj, n.key}, soft)
	case *sliceExpr:
		return nc.checkExprs([]expr{n.obj, n.start, n.stop, n.step}, soft)
	case *callExpr:
		if err := nc.checkExpr(n.fn, soft); err != nil {
			return err
		}
		if err := nc.checkExprs(n.args, soft); err != nil {
			return err
		}
		return nc.checkExprs(n.kwVal, soft)
	case *filterExpr:
		if !soft && !nc.knownFilter(n.name) {
			return fmt.Errorf("no filter named '%s'", n.name)
		}
		if err := nc.checkExpr(n.node, soft); err != nil {
			return err
		}
		if err := nc.checkExprs(n.args, soft); err != nil {
			return err
		}
		return nc.checkExprs(n.kwVal, soft)
	case *testExpr:
		if !soft && !nc.knownTest(n.name) {
			return fmt.Errorf("no test named '%s'", n.name)
		}
		if err := nc.checkExpr(n.node, soft); err != nil {
			return err
		}
		return nc.checkExprs(n.args, soft)
	case *binExpr:
		return nc.checkExprs([]expr{n.l, n.r}, soft)
	case *unaryExpr:
		return nc.checkExpr(n.x, soft)
	case *cmpExpr:
		if err := nc.checkExpr(n.first, soft); err != nil {
			return err
		}
		return nc.checkExprs(n.rest, soft)
	case *andExpr:
		return nc.checkExprs([]expr{n.l, n.r}, soft)
	case *orExpr:
		return nc.checkExprs([]expr{n.l, n.r}, soft)
	case *condExpr:
		return nc.checkExprs([]expr{n.test, n.a, n.b}, true)
	case *listExpr:
		return nc.checkExprs(n.items, soft)
	case *dictExpr:
		if err := nc.checkExprs(n.keys, soft); err != nil {
			return err
		}
		return nc.checkExprs(n.vals, soft)
	case *concatExpr:
		return nc.checkExprs(n.items, soft)
	}
	return nil
}

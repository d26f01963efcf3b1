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
func checkNames(body []stmt) error {
	return checkStmts(body, false)
}

func checkStmts(body []stmt, soft bool) error {
	for _, st := range body {
		if err := checkStmt(st, soft); err != nil {
			return err
		}
	}
	return nil
}

func checkStmt(st stmt, soft bool) error {
	switch n := st.(type) {
	case *printStmt:
		return checkExpr(n.x, soft)
	case *ifStmt:
		for i, c := range n.conds {
			if err := checkExpr(c, true); err != nil {
				return err
			}
			if err := checkStmts(n.bodies[i], true); err != nil {
				return err
			}
		}
		return checkStmts(n.els, true)
	case *forStmt:
		// The iterable is evaluated in the enclosing frame; the filter
		// condition, the body and the else block in frames of their own.
		if err := checkExpr(n.iter, soft); err != nil {
			return err
		}
		if err := checkExpr(n.cond, false); err != nil {
			return err
		}
		if err := checkStmts(n.body, false); err != nil {
			return err
		}
		return checkStmts(n.els, false)
	case *setStmt:
		return checkExpr(n.x, soft)
	case *setBlockStmt:
		if err := checkFilters(n.filters, false); err != nil {
			return err
		}
		return checkStmts(n.body, false)
	case *filterBlockStmt:
		if err := checkFilters(n.filters, false); err != nil {
			return err
		}
		return checkStmts(n.body, false)
	case *macroStmt:
		if err := checkExprs(n.m.defaults, false); err != nil {
			return err
		}
		return checkStmts(n.m.body, false)
	case *withStmt:
		if err := checkExprs(n.vals, soft); err != nil {
			return err
		}
		return checkStmts(n.body, false)
	case *blockStmt:
		return checkStmts(n.body, false)
	case *callBlockStmt:
		if err := checkExpr(n.call, soft); err != nil {
			return err
		}
		if err := checkExprs(n.defs, false); err != nil {
			return err
		}
		return checkStmts(n.body, false)
	}
	return nil
}

func checkFilters(fs []*filterExpr, soft bool) error {
	for _, f := range fs {
		if err := checkExpr(f, soft); err != nil {
			return err
		}
	}
	return nil
}

func checkExprs(xs []expr, soft bool) error {
	for _, x := range xs {
		if err := checkExpr(x, soft); err != nil {
			return err
		}
	}
	return nil
}

func checkExpr(x expr, soft bool) error {
	switch n := x.(type) {
	case nil, *constExpr, *nameExpr:
		return nil
	case *attrExpr:
		return checkExpr(n.obj, soft)
	case *itemExpr:
		return checkExprs([]expr{n.obj, n.key}, soft)
	case *sliceExpr:
		return checkExprs([]expr{n.obj, n.start, n.stop, n.step}, soft)
	case *callExpr:
		if err := checkExpr(n.fn, soft); err != nil {
			return err
		}
		if err := checkExprs(n.args, soft); err != nil {
			return err
		}
		return checkExprs(n.kwVal, soft)
	case *filterExpr:
		if !soft && !slices.Contains(jinjaFilterNames, n.name) {
			return fmt.Errorf("no filter named '%s'", n.name)
		}
		if err := checkExpr(n.node, soft); err != nil {
			return err
		}
		if err := checkExprs(n.args, soft); err != nil {
			return err
		}
		return checkExprs(n.kwVal, soft)
	case *testExpr:
		if !soft && !slices.Contains(jinjaTestNames, n.name) {
			return fmt.Errorf("no test named '%s'", n.name)
		}
		if err := checkExpr(n.node, soft); err != nil {
			return err
		}
		return checkExprs(n.args, soft)
	case *binExpr:
		return checkExprs([]expr{n.l, n.r}, soft)
	case *unaryExpr:
		return checkExpr(n.x, soft)
	case *cmpExpr:
		if err := checkExpr(n.first, soft); err != nil {
			return err
		}
		return checkExprs(n.rest, soft)
	case *andExpr:
		return checkExprs([]expr{n.l, n.r}, soft)
	case *orExpr:
		return checkExprs([]expr{n.l, n.r}, soft)
	case *condExpr:
		return checkExprs([]expr{n.test, n.a, n.b}, true)
	case *listExpr:
		return checkExprs(n.items, soft)
	case *dictExpr:
		if err := checkExprs(n.keys, soft); err != nil {
			return err
		}
		return checkExprs(n.vals, soft)
	case *concatExpr:
		return checkExprs(n.items, soft)
	}
	return nil
}

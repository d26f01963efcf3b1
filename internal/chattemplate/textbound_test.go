package chattemplate_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/chattemplate"
)

// TestPrintedContainerHeldToOutputLimit: a list or dict turned into
// text (printed, |string, |pprint, |upper, |trim) is a string built on
// the way and must be held to the 1 MiB output limit (DefaultMaxOutput:
// "bounds the rendered text and every string built on the way") before it
// is built, not after: [s]*N of a 1 MiB s otherwise builds N MiB.
func TestPrintedContainerHeldToOutputLimit(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{"l|string", "l|pprint", "l|upper", "l|trim", "l|lower"} {
		for _, dyn := range []bool{true, false} {
			// 20 items of 100,000 bytes: about 2 MB of text, twice the limit.
			src := `{% set s = "a" * 100000 %}{% set l = [s] * 20 %}{{ (` + expr + `)|length }}`
			opts := []chattemplate.Option{}
			if dyn {
				opts = append(opts, chattemplate.WithDynamoFrontend())
			}
			tm, err := chattemplate.Compile(src, opts...)
			if err != nil {
				t.Fatal(err)
			}
			out, err := tm.Render(context.Background(), chattemplate.Input{})
			if !errors.Is(err, chattemplate.ErrOutputTooLarge) {
				t.Errorf("%s (dynamo %v): %q, %v; want ErrOutputTooLarge (a string over %d bytes was built)",
					expr, dyn, out, err, chattemplate.DefaultMaxOutput)
			}
		}
	}
}

// TestWholeListWorkIsCharged: the instruction budget (fuel
// 5,000,000) bounds a render's work, and with it its time: a filter that
// copies a whole list (|list, |reverse) must cost fuel per item, as
// building a list of n items does (chargeItems), or a loop of them runs
// for seconds on one budget (and passes a 2 s deadline by seconds, since
// the deadline is only looked at every 512 steps). Here 30 loop steps
// copy a 500,000-item list 8 times each: 120,000,000 item copies, far
// over the budget, yet the render completes.
func TestWholeListWorkIsCharged(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"reverse", "list"} {
		chain := strings.Repeat("|"+f, 8)
		src := `{% set l = (range(100000)|list) * 5 %}{% for i in range(30) %}{% set x = l` + chain + ` %}{% endfor %}done`
		tm, err := chattemplate.Compile(src, chattemplate.WithDynamoFrontend(), chattemplate.WithTimeout(0))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		out, err := tm.Render(context.Background(), chattemplate.Input{})
		took := time.Since(start)
		if !errors.Is(err, chattemplate.ErrRenderUnavailable) {
			t.Errorf("l%s: rendered %q in %v with err %v; want the instruction budget exhausted",
				chain, out, took.Round(time.Millisecond), err)
		}
	}
}

// TestPrintedContainerBuiltWithinLimit: printing a list is refused
// once its text passes the output limit, not after all of it is built: a
// list of 64 strings of 1 MB printed must not allocate 64 MB (a list of
// 1,048,576 of them, which the item limit allows, would ask for 1 TB).
func TestPrintedContainerBuiltWithinLimit(t *testing.T) {
	src := `{% set s = "a" * 1000000 %}{% set l = [s] * 64 %}{{ l }}`
	tm, err := chattemplate.Compile(src, chattemplate.WithDynamoFrontend())
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = tm.Render(context.Background(), chattemplate.Input{})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, chattemplate.ErrOutputTooLarge) {
		t.Errorf("err %v, want ErrOutputTooLarge", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("the render allocated %d MB before refusing a print over the 1 MiB limit", got>>20)
	}
}

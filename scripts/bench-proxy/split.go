package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// split reads the call stacks of CPU samples taken over the whole machine
// during a run (`perf script -F comm,pid,ip,sym` of `perf record -a -g`)
// and tells, for each proxy, where its processes' CPU went: in system
// calls (the kernel's network stack on the path of each read and write),
// in Go's scheduler, allocating, in the collector, starting up, and in the
// rest (the proxy's own code and the libraries it calls), with the
// functions of continuum that cost most outside system calls. It is how
// to see what separates continuum from the floor and nginx under the
// benchmark's own load, with the generator and the backend taking turns
// on the cores, rather than in an in-process benchmark.

// splitMaxLine bounds one line of perf's output (a symbol name).
const splitMaxLine = 1 << 16

// splitModule marks continuum's own functions in a stack.
const splitModule = "github.com/continuum-router/continuum/internal/"

// The categories of a sample, the first that matches in this order.
var splitCategories = []string{"system calls", "start-up", "collector", "scheduler", "allocation", "the rest"}

// procSplit is what one process's samples add up to.
type procSplit struct {
	comm  string
	floor bool // a frame of the floor's code: the floor's process
	total int
	cats  map[string]int
	// own counts each continuum function once per sample outside system
	// calls and start-up that has it on its stack.
	own map[string]int
}

// splitReport is the split of one path: the processes of one role.
type splitReport struct {
	role  string
	pids  int
	total int
	cats  map[string]int
	own   map[string]int
}

// procKey names a process by its id and command: a process the run forks
// has its parent's command until it executes its own.
type procKey struct {
	pid  int
	comm string
}

// readSplit reads perf script's samples: a header line (comm, pid) and
// then one frame a line (address, symbol), leaf first, ended by an empty
// line.
func readSplit(r io.Reader) (map[procKey]*procSplit, error) {
	procs := map[procKey]*procSplit{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), splitMaxLine)
	var cur *procSplit
	var frames []string
	flush := func() {
		if cur != nil {
			cur.add(frames)
		}
		cur, frames = nil, frames[:0]
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] != ' ' && line[0] != '\t':
			flush()
			f := strings.Fields(line)
			if len(f) < 2 {
				return nil, fmt.Errorf("split: sample header %q: want comm and pid", line)
			}
			pid, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				return nil, fmt.Errorf("split: sample header %q: %w", line, err)
			}
			k := procKey{pid, strings.Join(f[:len(f)-1], " ")}
			cur = procs[k]
			if cur == nil {
				cur = &procSplit{comm: k.comm, cats: map[string]int{}, own: map[string]int{}}
				procs[k] = cur
			}
		case cur != nil:
			f := strings.Fields(line)
			sym := f[len(f)-1]
			if len(f) > 2 {
				sym = strings.Join(f[1:], " ")
			}
			sym, _, _ = strings.Cut(sym, "+0x")
			sym = strings.TrimSuffix(sym, " (deleted)")
			frames = append(frames, sym)
		}
	}
	flush()
	return procs, sc.Err()
}

// add counts one sample's stack.
func (p *procSplit) add(frames []string) {
	p.total++
	cat := splitCategory(frames)
	p.cats[cat]++
	seen := map[string]bool{}
	for _, f := range frames {
		if strings.Contains(f, splitModule+"floorproxy.") {
			p.floor = true
		}
		if cat == "system calls" || cat == "start-up" || !strings.HasPrefix(f, splitModule) || seen[f] {
			continue
		}
		seen[f] = true
		p.own[f]++
	}
}

// splitCategory names where a sample's CPU went.
func splitCategory(frames []string) string {
	has := func(names ...string) bool {
		for _, f := range frames {
			for _, n := range names {
				if strings.Contains(f, n) {
					return true
				}
			}
		}
		return false
	}
	switch {
	case has("entry_SYSCALL_64", "do_syscall_64", "internal/runtime/syscall/linux.Syscall6", "syscall.RawSyscall", "syscall.Syscall"):
		return "system calls"
	case has("runtime.main", "runtime.doInit", "runtime.schedinit", "_dl_start"):
		// A Go program's main goroutine only sets up and waits here: the
		// requests are served on goroutines of their own.
		return "start-up"
	case has("runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge", "runtime.gcAssistAlloc", "runtime.gcStart", "runtime.gcMarkDone"):
		return "collector"
	case has("runtime.mcall", "runtime.schedule", "runtime.findRunnable", "runtime.sysmon", "runtime.mstart"):
		return "scheduler"
	case has("runtime.mallocgc", "runtime.newobject", "runtime.growslice", "runtime.makeslice", "runtime.slicebytetostring", "runtime.rawstring", "runtime.makemap", "runtime.mapassign", "runtime.concatstring"):
		return "allocation"
	}
	return "the rest"
}

// roleOf names a process's path: continuum, nginx or the floor; "" for the
// rest (the generator, the backend, the machine).
func roleOf(p *procSplit) string {
	switch {
	case p.comm == "nginx":
		return "nginx"
	case p.floor:
		return "floor"
	case strings.HasPrefix(p.comm, "continuum"):
		return "continuum"
	}
	return ""
}

// splitByRole adds the processes of each role together.
func splitByRole(procs map[procKey]*procSplit) []*splitReport {
	byRole := map[string]*splitReport{}
	keys := slices.SortedFunc(maps.Keys(procs), func(a, b procKey) int {
		return cmp.Or(cmp.Compare(a.pid, b.pid), strings.Compare(a.comm, b.comm))
	})
	for _, k := range keys {
		p := procs[k]
		role := roleOf(p)
		if role == "" {
			continue
		}
		r := byRole[role]
		if r == nil {
			r = &splitReport{role: role, cats: map[string]int{}, own: map[string]int{}}
			byRole[role] = r
		}
		r.pids++
		r.total += p.total
		for k, v := range p.cats {
			r.cats[k] += v
		}
		for k, v := range p.own {
			r.own[k] += v
		}
	}
	var out []*splitReport
	for _, role := range []string{"continuum", "nginx", "floor"} {
		if r := byRole[role]; r != nil {
			out = append(out, r)
		}
	}
	return out
}

// writeSplit prints the split as markdown: a table of the paths, CPU
// seconds at hz samples a second, each category against the floor's when
// the floor was measured, then continuum's costliest functions.
func writeSplit(w io.Writer, reports []*splitReport, hz float64, top int) {
	var floor *splitReport
	for _, r := range reports {
		if r.role == "floor" {
			floor = r
		}
	}
	fmt.Fprintf(w, "| path | processes | CPU s (samples) |")
	for _, c := range splitCategories {
		fmt.Fprintf(w, " %s |", c)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "|---|---:|---:|")
	for range splitCategories {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, r := range reports {
		fmt.Fprintf(w, "| %s | %d | %.2f (%d) |", r.role, r.pids, float64(r.total)/hz, r.total)
		for _, c := range splitCategories {
			fmt.Fprintf(w, " %.2f |", float64(r.cats[c])/hz)
		}
		fmt.Fprintln(w)
	}
	if floor != nil && floor.total > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "against the floor (CPU without start-up, which a run's requests do not pay):")
		for _, r := range reports {
			if r == floor {
				continue
			}
			fmt.Fprintf(w, "- %s: %.2fx the floor's;", r.role, float64(r.total-r.cats["start-up"])/float64(floor.total-floor.cats["start-up"]))
			for _, c := range splitCategories {
				if c == "start-up" {
					continue
				}
				fmt.Fprintf(w, " %s %+.2f s", c, float64(r.cats[c]-floor.cats[c])/hz)
			}
			fmt.Fprintln(w)
		}
	}
	for _, r := range reports {
		if r.role != "continuum" || len(r.own) == 0 {
			continue
		}
		fmt.Fprintf(w, "\ncontinuum's functions by CPU outside system calls and start-up, callees included (s):\n\n")
		names := slices.SortedFunc(maps.Keys(r.own), func(a, b string) int {
			return cmp.Or(cmp.Compare(r.own[b], r.own[a]), strings.Compare(a, b))
		})
		for _, n := range names[:min(top, len(names))] {
			fmt.Fprintf(w, "    %6.3f  %s\n", float64(r.own[n])/hz, strings.TrimPrefix(n, splitModule))
		}
	}
}

// runSplit is the split command: perf script's output on r, the report on
// w.
func runSplit(r io.Reader, w io.Writer, hz float64, top int) error {
	if hz <= 0 {
		return fmt.Errorf("split: -hz %v: want the sampling frequency perf record was given", hz)
	}
	procs, err := readSplit(r)
	if err != nil {
		return err
	}
	reports := splitByRole(procs)
	if len(reports) == 0 {
		return fmt.Errorf("split: no sample of continuum, nginx or the floor among %d processes", len(procs))
	}
	writeSplit(w, reports, hz, top)
	return nil
}

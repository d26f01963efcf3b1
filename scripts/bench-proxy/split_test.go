package main

import (
	"strings"
	"testing"
)

// perfScript is `perf script -F comm,pid,ip,sym` output in the shape perf
// writes it: a header line, then frames leaf first, indented, each with
// its address and symbol (offsets and "(deleted)" as perf may add them).
const perfScript = `bench-proxy 100 
	ffffffff8177d51a elf_load
	ffffffff8223c951 do_syscall_64

continuum 100 
	          4b1c20 runtime.memmove+0x20
	          4b2000 github.com/continuum-router/continuum/internal/h1.parseHead
	          4b3000 github.com/continuum-router/continuum/internal/h1.(*conn).serve
	          4b4000 runtime.goexit.abi0

continuum 100 
	ffffffff81000130 tcp_sendmsg
	ffffffff81000130 entry_SYSCALL_64_after_hwframe
	          4b5000 internal/runtime/syscall/linux.Syscall6
	          4b6000 github.com/continuum-router/continuum/internal/h1.(*Socket).write
	          4b4000 runtime.goexit.abi0

continuum 100 
	          4b7000 runtime.mallocgcSmallNoscan
	          4b8000 runtime.newobject
	          4b2000 github.com/continuum-router/continuum/internal/h1.parseHead
	          4b3000 github.com/continuum-router/continuum/internal/h1.(*conn).serve
	          4b4000 runtime.goexit.abi0

continuum 100 
	          4b9000 github.com/continuum-router/continuum/internal/gcpolicy.warmHeap
	          4ba000 runtime.main
	          4b4000 runtime.goexit.abi0

continuum 100 
	          4bb000 runtime.findRunnable
	          4bc000 runtime.schedule
	          4bd000 runtime.mcall

continuum 100 
	          4be000 runtime.scanobject
	          4bf000 runtime.gcBgMarkWorker
	          4b4000 runtime.goexit.abi0

bench-proxy 200 
	          5b0000 github.com/continuum-router/continuum/internal/floorproxy.floorConn
	          5b1000 runtime.goexit.abi0

bench-proxy 200 
	ffffffff81000130 do_syscall_64
	          5b2000 syscall.RawSyscall6
	          5b3000 github.com/continuum-router/continuum/internal/h1.(*Socket).read

bench-proxy 300 
	          6b0000 github.com/tsenart/vegeta/v12/lib.(*Attacker).hit

nginx 400 
	          7b0000 ngx_http_parse_request_line
	          7b1000 ngx_worker_process_cycle (/usr/sbin/nginx)

nginx 401 
	ffffffff81000130 entry_SYSCALL_64_after_hwframe
	          7b2000 __GI___writev

`

func TestSplit(t *testing.T) {
	procs, err := readSplit(strings.NewReader(perfScript))
	if err != nil {
		t.Fatal(err)
	}
	reports := splitByRole(procs)
	got := map[string]*splitReport{}
	var roles []string
	for _, r := range reports {
		got[r.role] = r
		roles = append(roles, r.role)
	}
	if strings.Join(roles, ",") != "continuum,nginx,floor" {
		t.Fatalf("roles %v, want continuum, nginx, floor (the generator and the pre-exec fork left out)", roles)
	}
	c := got["continuum"]
	want := map[string]int{"the rest": 1, "system calls": 1, "allocation": 1, "start-up": 1, "scheduler": 1, "collector": 1}
	if c.total != 6 || c.pids != 1 {
		t.Errorf("continuum: %d samples in %d processes, want 6 in 1", c.total, c.pids)
	}
	for k, v := range want {
		if c.cats[k] != v {
			t.Errorf("continuum %s: %d samples, want %d (all: %v)", k, c.cats[k], v, c.cats)
		}
	}
	// parseHead is on two stacks outside system calls and start-up; the
	// socket write only under a system call; warmHeap only at start-up.
	if n := c.own[splitModule+"h1.parseHead"]; n != 2 {
		t.Errorf("h1.parseHead counted %d times, want 2", n)
	}
	for _, f := range []string{"h1.(*Socket).write", "gcpolicy.warmHeap"} {
		if n := c.own[splitModule+f]; n != 0 {
			t.Errorf("%s counted %d times, want 0", f, n)
		}
	}
	if f := got["floor"]; f.total != 2 || f.cats["system calls"] != 1 || f.cats["the rest"] != 1 {
		t.Errorf("floor: %d samples, %v; want 2, one in system calls", f.total, f.cats)
	}
	if n := got["nginx"]; n.total != 2 || n.pids != 2 || n.cats["system calls"] != 1 {
		t.Errorf("nginx: %d samples in %d processes, %v; want 2 in 2, one in system calls", n.total, n.pids, n.cats)
	}

	var out strings.Builder
	writeSplit(&out, reports, 2, 5)
	for _, line := range []string{
		"| continuum | 1 | 3.00 (6) | 0.50 | 0.50 | 0.50 | 0.50 | 0.50 | 0.50 |",
		"| floor | 1 | 1.00 (2) | 0.50 | 0.00 | 0.00 | 0.00 | 0.00 | 0.50 |",
		// Without start-up: 5 samples against the floor's 2.
		"- continuum: 2.50x the floor's; system calls +0.00 s collector +0.50 s scheduler +0.50 s allocation +0.50 s the rest +0.00 s",
		"     1.000  h1.parseHead",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("report lacks %q:\n%s", line, out.String())
		}
	}
}

func TestSplitRefuses(t *testing.T) {
	var out strings.Builder
	for name, in := range map[string]string{
		"no proxy sample":   "bench-proxy 300 \n\t 6b0000 main.main\n\n",
		"a header, no pid":  "continuum\n\t 1 runtime.main\n\n",
		"a pid not numeric": "continuum x1\n\t 1 runtime.main\n\n",
		"nothing":           "",
	} {
		if err := runSplit(strings.NewReader(in), &out, 1999, 5); err == nil {
			t.Errorf("%s: split succeeded", name)
		}
	}
	if err := runSplit(strings.NewReader(perfScript), &out, 0, 5); err == nil {
		t.Error("split with -hz 0 succeeded")
	}
}

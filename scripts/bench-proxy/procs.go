package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/continuum-router/continuum/internal/loopport"
)

// proc is a process the run started: the backend, continuum serve or the
// nginx master (whose workers are found once it serves).
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	// pids are the processes whose CPU time is the proxy's: the process
	// itself and, for nginx, its workers.
	pids []int
}

// start runs name's command with its output in dir/name.log.
func start(dir, name string, args []string, env []string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return &proc{name: name, cmd: cmd, log: logPath, pids: []int{cmd.Process.Pid}}, nil
}

// stop asks the process to end (SIGTERM; nginx's master ends its workers)
// and kills it after a grace.
func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// tail is the end of the process's log, for errors.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// startBackend runs this program's backend command and reads the address
// it listens on.
func startBackend(dir string, tokens int, gap time.Duration) (*proc, string, error) {
	return startSelf(dir, "backend", "backend", "-addr", "127.0.0.1:0", "-tokens", strconv.Itoa(tokens), "-gap", gap.String())
}

// startFloor runs this program's floor command in front of backendAddr,
// with work and touch added per request (zero: none).
func startFloor(dir, backendAddr string, work time.Duration, touch int) (*proc, string, error) {
	return startSelf(dir, pathFloor, "floor", "-addr", "127.0.0.1:0", "-upstream", backendAddr,
		"-work", work.String(), "-touch", strconv.Itoa(touch))
}

// startSelf runs this program with args as the process name, its stderr in
// dir/name.log, and reads the "listening HOST:PORT" line it prints first.
func startSelf(dir, name string, args ...string) (*proc, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(self, args...)
	cmd.Env = os.Environ()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = f.Close() }()
	cmd.Stderr = f
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, pids: []int{cmd.Process.Pid}}
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		p.stop()
		if err == nil {
			err = errors.New("no address")
		}
		return nil, "", fmt.Errorf("%s did not say where it listens (%q): %w", name, line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return p, addr, nil
}

// startContinuum runs `continuum serve` with one plain backend.
func startContinuum(dir, name, bin, backendAddr string) (*proc, string, error) {
	addr, err := loopport.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	cfg := fmt.Sprintf(`# One plain OpenAI backend, no Dynamo: the router as a reverse proxy.
# Idle client connections are kept as long as nginx keeps them here.
server:
  bind_address: %q
  idle_timeout: 300s
backends:
  - name: bench
    url: "http://%s"
`, addr, backendAddr)
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, "", err
	}
	p, err := start(dir, name, []string{bin, "serve", "--config", path, "--log-level", "warn"}, os.Environ())
	return p, addr, err
}

// nginxConf is an nginx reverse proxy as an operator would put it in front
// of a model server: keep-alive connections to the upstream (HTTP/1.1, the
// Connection header cleared, a pool of idle connections), responses and
// request bodies passed through unbuffered so SSE events leave as they
// arrive, no access log (continuum logs no line per request either), and
// the same idle limits as continuum's: a client connection kept 300 s
// (continuum's server.idle_timeout is set to that too), an idle upstream
// connection 90 s (continuum's fixed limit). A connection the generator or
// a proxy opens in a burst and then leaves idle is closed by both proxies
// or by neither, so neither pays for reconnecting where the other does not.
const nginxConf = `worker_processes auto;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events {
    worker_connections 16384;
}
http {
    access_log off;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    keepalive_requests 10000000;
    keepalive_timeout 300s;
    upstream backend {
        server %[2]s;
        keepalive 256;
        keepalive_requests 10000000;
        keepalive_timeout 90s;
    }
    server {
        listen %[3]s backlog=4096;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
        }
    }
}
`

// startNginx runs nginx in the foreground (master and workers) with the
// configuration above.
func startNginx(dir, bin, backendAddr string) (*proc, string, error) {
	addr, err := loopport.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, fmt.Appendf(nil, nginxConf, dir, backendAddr, addr), 0o600); err != nil {
		return nil, "", err
	}
	p, err := start(dir, "nginx", []string{bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", path, "-g", "daemon off;"}, os.Environ())
	return p, addr, err
}

// findChildren adds the processes whose parent is p's process (nginx's
// workers) to p's pids.
func (p *proc) findChildren() error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err == nil && st.ppid == p.cmd.Process.Pid {
			p.pids = append(p.pids, pid)
		}
	}
	return nil
}

// usage is what a proxy's processes have consumed so far: CPU time in
// clock ticks, read and write system calls (/proc/PID/io), and context
// switches of all their threads (/proc/PID/task/*/status).
type usage struct {
	ticks, syscr, syscw, ctxsw int64
}

func (u usage) sub(v usage) usage {
	return usage{u.ticks - v.ticks, u.syscr - v.syscr, u.syscw - v.syscw, u.ctxsw - v.ctxsw}
}

func (p *proc) usage() (usage, error) {
	var sum usage
	for _, pid := range p.pids {
		st, err := readStat(pid)
		if err != nil {
			return usage{}, fmt.Errorf("%s: %w", p.name, err)
		}
		sum.ticks += st.utime + st.stime
		// The system calls and switches are diagnostics: a process the
		// run may not read them of (nginx workers under another user)
		// counts none.
		io := procFields("/proc/"+strconv.Itoa(pid)+"/io", "syscr", "syscw")
		sum.syscr += io[0]
		sum.syscw += io[1]
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/status")
		for _, t := range tasks {
			sw := procFields(t, "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
			sum.ctxsw += sw[0] + sw[1]
		}
	}
	return sum, nil
}

// procFields reads "name: value" lines of a /proc file, 0 for a name it
// does not find.
func procFields(path string, names ...string) []int64 {
	out := make([]int64, len(names))
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for i, n := range names {
			if k == n {
				out[i], _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
	}
	return out
}

// stat is what the run reads of /proc/PID/stat.
type stat struct {
	ppid         int
	utime, stime int64
}

func readStat(pid int) (stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, err
	}
	return parseStat(string(b))
}

// parseStat reads the parent and the CPU times of a /proc/PID/stat line;
// the command name (field 2) is parenthesized and may hold spaces and
// parentheses, so fields are counted from its last ')'.
func parseStat(s string) (stat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return stat{}, errors.New("stat: no command name")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
	if len(f) < 13 {
		return stat{}, errors.New("stat: too few fields")
	}
	var st stat
	var err error
	if st.ppid, err = strconv.Atoi(f[1]); err != nil {
		return stat{}, fmt.Errorf("stat ppid: %w", err)
	}
	if st.utime, err = strconv.ParseInt(f[11], 10, 64); err != nil {
		return stat{}, fmt.Errorf("stat utime: %w", err)
	}
	if st.stime, err = strconv.ParseInt(f[12], 10, 64); err != nil {
		return stat{}, fmt.Errorf("stat stime: %w", err)
	}
	return st, nil
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat times,
// from the auxiliary vector (AT_CLKTCK); 100 when it cannot be read.
func clockTicks() int64 {
	const atClkTck = 17
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return 100
	}
	for i := 0; i+16 <= len(b); i += 16 {
		if binary.NativeEndian.Uint64(b[i:]) == atClkTck {
			if v := int64(binary.NativeEndian.Uint64(b[i+8:])); v > 0 {
				return v
			}
		}
	}
	return 100
}

// waitServing polls url with a chat request until it answers 200, up to
// a deadline.
func waitServing(ctx context.Context, client *http.Client, url string, body string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not serving: %w", url, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// hostSteal is the machine's steal time so far in clock ticks, summed over
// its CPUs (/proc/stat): time a virtual CPU had work but the hypervisor
// ran something else. A proxy cannot cause it, so a slice that met much of
// it met a stall of the host, whichever path ran then. 0 where the kernel
// does not count it.
func hostSteal() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	return stealOf(string(b))
}

// stealOf reads the steal field of /proc/stat's first line, the sum over
// the CPUs.
func stealOf(procStat string) int64 {
	line, _, _ := strings.Cut(procStat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	v, _ := strconv.ParseInt(f[8], 10, 64)
	return v
}

// loadAvg is /proc/loadavg's three averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// cpuModel is the first model name of /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// commandOutput is the first line a command prints (stdout or stderr).
func commandOutput(args ...string) string {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return "?"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

package fleetsim_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/continuum-router/continuum/internal/fleetsim"
)

// TestDemoSweepsDirsOfDeadDemos: a demo killed by what it cannot catch
// (SIGKILL, SIGPIPE from a closed stdout) left its directory in the
// temporary directory for good; the next demo removes the directories
// whose owner process is gone, and keeps those of a live owner, of another
// host (a container sharing the directory), without an owner, and its own
// (which its Stop removes).
func TestDemoSweepsDirsOfDeadDemos(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	dir := func(name string, owner int, host string) string {
		p := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Join(p, "v1", "instances"), 0o755); err != nil {
			t.Fatal(err)
		}
		if owner > 0 {
			if err := os.WriteFile(filepath.Join(p, "owner.pid"), []byte(strconv.Itoa(owner)+" "+host+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	dead := dir("continuum-demo-111", gone.Process.Pid, host)
	live := dir("continuum-demo-222", os.Getppid(), host)
	elsewhere := dir("continuum-demo-555", gone.Process.Pid, host+"-other")
	ownerless := dir("continuum-demo-333", 0, "")
	other := dir("unrelated-444", gone.Process.Pid, host)

	d, err := fleetsim.StartDemo(fleetsim.Options{Prefill: 1, Decode: 1}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the directory of a demo whose process is gone is still there (%v)", err)
	}
	for _, p := range []string{live, elsewhere, ownerless, other, d.Root} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", filepath.Base(p), err)
		}
	}
	b, err := os.ReadFile(filepath.Join(d.Root, "owner.pid"))
	if err != nil || string(b) != strconv.Itoa(os.Getpid())+" "+host+"\n" {
		t.Errorf("the demo's owner file: %q, %v", b, err)
	}
	d.Stop()
	if _, err := os.Stat(d.Root); !os.IsNotExist(err) {
		t.Errorf("Stop left the demo's directory (%v)", err)
	}
}

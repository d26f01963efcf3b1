package kube_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
	"github.com/continuum-router/continuum/internal/testutil"
)

// Known hashes; worker-0's is also the vector upstream Dynamo's own tests
// pin.
func TestHashPodNameVectors(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]uint64{
		"worker-0":                   1186445869714687,
		"worker-1":                   6167992384364830,
		"worker-99999":               7410589986301036,
		"fake-name-1-0-worker-nrdfv": 1009006049675451,
		"deployment-with-hash-suffix-a1b2c3d4e5f6": 2590930466072916,
	} {
		if got := kube.HashPodName(name); got != want {
			t.Errorf("HashPodName(%q) = %d (%x), want %d", name, got, got, want)
		}
	}
}

// podNames are names of every length around the 8-byte word boundaries,
// typical pod names, and non-ASCII ones.
func podNames() []string {
	var out []string
	for n := range 40 {
		out = append(out, strings.Repeat("a", n))
	}
	for i := range 200 {
		out = append(out, fmt.Sprintf("vllm-disagg-decode-%d-%05x", i%7, i*7919))
	}
	// A real collision (see TestPodsSourceHashCollision): Rust must agree.
	return append(out, "ünïcødé-pod", "日本-worker-0", "x", "worker-34095562", "worker-126348249")
}

// rustGolden holds Rust's DefaultHasher hash (masked to 53 bits, as
// HashPodName is) of every name of podNames, one `"name" hash` line each.
// It is committed so that HashPodName is checked against Rust's own values
// where there is no rustc (TestHashPodNameRustGolden). It was generated from
// real rustc output (rustc 1.95.0; Debian 12's rustc 1.63.0, which .ci/run
// installs where there is no rustup, prints the same values) by
// TestHashPodNameAgainstRust:
//
//	go test -run AgainstRust ./internal/dynamo/discovery/kube -update
const rustGolden = "testdata/podhash-rust-defaulthasher.txt"

// TestHashPodNameRustGolden checks HashPodName against the committed values
// of Rust's DefaultHasher.
func TestHashPodNameRustGolden(t *testing.T) {
	data, err := os.ReadFile(rustGolden)
	if err != nil {
		t.Fatal(err)
	}
	names := podNames()
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != len(names) {
		t.Fatalf("%s has %d lines for %d names (regenerate it: see rustGolden)", rustGolden, len(lines), len(names))
	}
	for i, line := range lines {
		quoted, err := strconv.QuotedPrefix(line)
		if err != nil {
			t.Fatalf("%s:%d: %v", rustGolden, i+1, err)
		}
		name, _ := strconv.Unquote(quoted)
		want, err := strconv.ParseUint(strings.TrimPrefix(line[len(quoted):], " "), 10, 64)
		if err != nil {
			t.Fatalf("%s:%d: %v", rustGolden, i+1, err)
		}
		if name != names[i] {
			t.Fatalf("%s:%d is for %q, podNames has %q there (regenerate it: see rustGolden)", rustGolden, i+1, name, names[i])
		}
		if got := kube.HashPodName(name); got != want {
			t.Errorf("HashPodName(%q) = %d, Rust's DefaultHasher says %d (%s)", name, got, want, rustGolden)
		}
	}
}

// findRustc looks for rustc on PATH, then where rustup installs it.
func findRustc() (string, error) {
	p, err := exec.LookPath("rustc")
	if err == nil {
		return p, nil
	}
	if home := os.Getenv("HOME"); home != "" {
		p := filepath.Join(home, ".cargo", "bin", "rustc")
		if _, statErr := os.Stat(p); statErr == nil {
			return p, nil
		}
	}
	return "", err
}

// TestHashPodNameAgainstRust compiles a program with rustc that prints
// DefaultHasher's hash of each name, and checks HashPodName and rustGolden
// against it (with -update it rewrites rustGolden): Rust does not promise
// that DefaultHasher stays the same across releases, and a toolchain that
// changed it would change the instance ids Dynamo gives pods. Without rustc
// (on PATH or in $HOME/.cargo/bin) the test skips, or fails in CI.
func TestHashPodNameAgainstRust(t *testing.T) {
	t.Parallel() // with -update it writes rustGolden, which only the serial golden test reads (first)
	rustc, err := findRustc()
	if err != nil {
		testutil.SkipOrFailInCI(t, "rustc is neither on PATH nor in $HOME/.cargo/bin: the Rust cross-check needs it (%s still checks the committed values)", rustGolden)
	}
	dir := t.TempDir()
	src := `use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::BufRead;
fn main() {
    for line in std::io::stdin().lock().lines() {
        let name = line.unwrap();
        let mut h = DefaultHasher::new();
        name.as_str().hash(&mut h);
        println!("{}", h.finish() & 0x001F_FFFF_FFFF_FFFF);
    }
}
`
	if err := os.WriteFile(filepath.Join(dir, "hash.rs"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hash")
	if out, err := exec.Command(rustc, "-O", "-o", bin, filepath.Join(dir, "hash.rs")).CombinedOutput(); err != nil {
		t.Fatalf("rustc: %v\n%s", err, out)
	}
	names := podNames()
	cmd := exec.Command(bin)
	cmd.Stdin = strings.NewReader(strings.Join(names, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != len(names) {
		t.Fatalf("rust printed %d hashes for %d names", len(lines), len(names))
	}
	var golden strings.Builder
	for i, name := range names {
		want, err := strconv.ParseUint(lines[i], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if got := kube.HashPodName(name); got != want {
			t.Errorf("HashPodName(%q) = %d, Rust's DefaultHasher says %d", name, got, want)
		}
		fmt.Fprintf(&golden, "%s %d\n", strconv.Quote(name), want)
	}
	testutil.Golden(t, rustGolden, []byte(golden.String()))
}

func BenchmarkHashPodName(b *testing.B) {
	for b.Loop() {
		_ = kube.HashPodName("vllm-disagg-decode-worker-7f9c4d5b8-x2k9p")
	}
}

// Hashing any valid pod name, up to the 253 characters of a DNS subdomain,
// allocates nothing: the sources hash every pod and resource they read.
func TestHashPodNameNoAllocation(t *testing.T) {
	for _, n := range []int{8, 63, 64, 200, 253} {
		name := strings.Repeat("a", n)
		if allocs := testing.AllocsPerRun(100, func() { _ = kube.HashPodName(name) }); allocs != 0 {
			t.Errorf("a %d-character name: %v allocations", n, allocs)
		}
	}
}

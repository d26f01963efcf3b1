package fleet

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// check verifies the tree's shape: items in order, every branch's items
// are its children's least items, all leaves at one depth, no node above
// nodeMax, and none but the root below nodeMin.
func checkTree[T any](t *testing.T, tr *tree[T]) {
	t.Helper()
	if tr.root == nil {
		if tr.n != 0 {
			t.Fatalf("empty tree of length %d", tr.n)
		}
		return
	}
	depth := -1
	var visit func(n *node[T], d int, root bool) int
	visit = func(n *node[T], d int, root bool) int {
		if n.n > nodeMax || (!root && n.n < nodeMin) || n.n == 0 {
			t.Fatalf("node of %d items at depth %d", n.n, d)
		}
		var zero T
		for _, v := range n.items[n.n:] {
			if any(v) != any(zero) {
				t.Fatal("a node holds an item past its length")
			}
		}
		if !n.branch {
			if depth >= 0 && depth != d {
				t.Fatalf("leaves at depths %d and %d", depth, d)
			}
			depth = d
			return n.n
		}
		for _, k := range n.kids[n.n:] {
			if k != nil {
				t.Fatal("a branch holds a child past its length")
			}
		}
		total := 0
		for i, k := range n.kids[:n.n] {
			if tr.cmp(n.items[i], k.items[0]) != 0 {
				t.Fatalf("branch item %d is not its child's least item", i)
			}
			total += visit(k, d+1, false)
		}
		return total
	}
	if got := visit(tr.root, 0, true); got != tr.n {
		t.Fatalf("%d items under the root, length %d", got, tr.n)
	}
	if !slices.IsSortedFunc(slices.Collect(tr.All()), func(a, b T) int { return tr.cmp(a, b) }) {
		t.Fatal("items out of order")
	}
}

type kv struct{ k, v int }

func cmpKV(a, b kv) int { return cmp.Compare(a.k, b.k) }

// TestTreeAgainstSlice applies random puts and removes to a tree and to a
// sorted slice, freezing the tree now and then: every frozen copy must keep
// the content it had when frozen while the working tree goes on changing.
func TestTreeAgainstSlice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		keys     int // keys drawn from [0, keys)
		fill     int // keys put before the random ops
		ops      int
		freezeIn int // freeze about once in this many ops
		putShare int // percent of ops that are puts
	}{
		{"small", 40, 0, 4000, 7, 60},
		{"grow", 5000, 0, 20000, 50, 85},
		{"churn", 3000, 3000, 30000, 3, 50},
		{"drain", 20000, 20000, 60000, 100, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(tc.keys), uint64(tc.ops)))
			tr := newTree(cmpKV)
			var model []kv
			type frozen struct {
				tr   tree[kv]
				want []kv
			}
			var frozens []frozen
			for k := range tc.fill {
				tr.put(kv{k, -1})
				model = append(model, kv{k, -1})
			}
			for op := range tc.ops {
				k := rng.IntN(tc.keys)
				i, found := slices.BinarySearchFunc(model, kv{k: k}, cmpKV)
				if rng.IntN(100) < tc.putShare {
					v := kv{k, op}
					tr.put(v)
					if found {
						model[i] = v
					} else {
						model = slices.Insert(model, i, v)
					}
				} else {
					if got := tr.remove(kv{k: k}); got != found {
						t.Fatalf("op %d: remove(%d) = %v, held %v", op, k, got, found)
					}
					if found {
						model = slices.Delete(model, i, i+1)
					}
				}
				if got, ok := tr.get(kv{k: k}); ok != (slices.ContainsFunc(model, func(x kv) bool { return x.k == k })) || (ok && got != model[i]) {
					t.Fatalf("op %d: get(%d) = %v, %v", op, k, got, ok)
				}
				if rng.IntN(tc.freezeIn) == 0 {
					frozens = append(frozens, frozen{tr.freeze(), slices.Clone(model)})
				}
			}
			checkTree(t, &tr)
			if got := slices.Collect(tr.All()); !slices.Equal(got, model) {
				t.Fatalf("working tree holds %d items, want %d", len(got), len(model))
			}
			for i, f := range frozens {
				checkTree(t, &f.tr)
				if got := slices.Collect(f.tr.All()); !slices.Equal(got, f.want) || f.tr.Len() != len(f.want) {
					t.Fatalf("frozen tree %d changed: %d items, want %d", i, len(got), len(f.want))
				}
			}
		})
	}
}

// TestTreeEmpties: removing every item, in any order, from a tree grown by
// puts or built full, leaves an empty tree that is well formed at every
// step, and a frozen copy keeps its items.
func TestTreeEmpties(t *testing.T) {
	t.Parallel()
	for _, built := range []bool{false, true} {
		// Built from 2,048 items, every node is full: removals then
		// merge and redistribute branches as well as leaves.
		n := 5000
		if built {
			n = nodeMax * nodeMax * 2
		}
		for name, order := range map[string][]int{
			"ascending":  rangeInts(n, false),
			"descending": rangeInts(n, true),
			"random":     rand.New(rand.NewPCG(5, 5)).Perm(n),
		} {
			t.Run(fmt.Sprintf("built=%v/%s", built, name), func(t *testing.T) {
				t.Parallel()
				tr := newTree(cmpKV)
				if built {
					items := make([]kv, n)
					for k := range items {
						items[k] = kv{k, k}
					}
					tr = buildTree(items, cmpKV)
					tr.epoch = epochs.Add(1)
				} else {
					for k := range n {
						tr.put(kv{k, k})
					}
				}
				full := tr.freeze()
				for i, k := range order {
					if !tr.remove(kv{k: k}) {
						t.Fatalf("%d not removed", k)
					}
					if tr.remove(kv{k: k}) {
						t.Fatalf("%d removed twice", k)
					}
					if i%97 == 0 {
						checkTree(t, &tr)
						tr.freeze()
					}
				}
				if tr.Len() != 0 || tr.root != nil {
					t.Fatalf("%d items left", tr.Len())
				}
				checkTree(t, &full)
				if full.Len() != n || len(slices.Collect(full.All())) != n {
					t.Fatal("the frozen full tree changed")
				}
			})
		}
	}
}

func rangeInts(n int, down bool) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
		if down {
			out[i] = n - 1 - i
		}
	}
	return out
}

// TestTreeSpan: a span yields exactly the items its probe marks, from any
// start, including across leaves and at the ends.
func TestTreeSpan(t *testing.T) {
	t.Parallel()
	var items []kv
	for k := range 3000 {
		items = append(items, kv{k * 2, k})
	}
	built := buildTree(items, cmpKV)
	checkTree(t, &built)
	grown := newTree(cmpKV)
	for _, i := range rand.New(rand.NewPCG(1, 2)).Perm(len(items)) {
		grown.put(items[i])
	}
	checkTree(t, &grown)
	for _, tr := range []tree[kv]{built, grown} {
		for _, r := range [][2]int{{0, 0}, {0, 1}, {-5, 3}, {1, 2}, {63, 130}, {2000, 2001}, {5990, 9000}, {-1, 10000}, {7000, 8000}} {
			lo, hi := r[0], r[1]
			var want []kv
			for _, v := range items {
				if v.k >= lo && v.k < hi {
					want = append(want, v)
				}
			}
			got := slices.Collect(tr.span(func(v kv) int {
				switch {
				case v.k < lo:
					return -1
				case v.k >= hi:
					return 1
				}
				return 0
			}))
			if !slices.Equal(got, want) {
				t.Errorf("span [%d, %d): %d items, want %d", lo, hi, len(got), len(want))
			}
		}
		n := 0
		for range tr.All() {
			if n++; n == 10 {
				break // stopping early must not panic
			}
		}
	}
}

// TestTreeChangeCopiesOnePath: after a freeze, changing one item copies one
// node per level and shares every other node with the frozen copy.
func TestTreeChangeCopiesOnePath(t *testing.T) {
	t.Parallel()
	tr := newTree(cmpKV)
	for k := range 16384 {
		tr.put(kv{k, 0})
	}
	before := tr.freeze()
	tr.put(kv{8000, 1})
	shared, fresh := 0, 0
	old := map[*node[kv]]bool{}
	var mark func(n *node[kv])
	mark = func(n *node[kv]) {
		old[n] = true
		for _, k := range n.kids[:n.n] {
			if k == nil {
				break // a leaf
			}
			mark(k)
		}
	}
	mark(before.root)
	var count func(n *node[kv])
	count = func(n *node[kv]) {
		if old[n] {
			shared++
		} else {
			fresh++
		}
		for _, k := range n.kids[:n.n] {
			if k == nil {
				break // a leaf
			}
			count(k)
		}
	}
	count(tr.root)
	depth := 1
	for n := tr.root; n.branch; n = n.kids[0] {
		depth++
	}
	if depth < 3 {
		t.Fatalf("depth %d: the test wants a deeper tree", depth)
	}
	if fresh != depth {
		t.Errorf("%d nodes copied for one change in a tree of depth %d (%d shared)", fresh, depth, shared)
	}
	if v, _ := before.get(kv{k: 8000}); v.v != 0 {
		t.Error("the frozen copy saw the change")
	}
	if v, _ := tr.get(kv{k: 8000}); v.v != 1 {
		t.Error("the working tree lost the change")
	}
}

// TestTreeChunks: bulk loading splits runs evenly within the node bounds.
func TestTreeChunks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    int
		want []int
	}{
		{0, nil}, {1, []int{1}}, {32, []int{32}}, {33, []int{16, 17}}, {70, []int{23, 23, 24}},
	} {
		var got []int
		for part := range chunks(tc.n) {
			got = append(got, part[1]-part[0])
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("chunks(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

package allocator

import (
	"net/netip"

	"github.com/google/btree"

	"github.com/portico-lb/portico/rules"
)

// run is a stretch of consecutive unavailable addresses of one family, [first, last].
type run struct{ first, last netip.Addr }

// runs is the set of allocated addresses kept as maximal runs in a B-tree, so that "is this
// address taken" and "lowest free address of a range" cost O(log n) in the number of runs,
// whatever the size of the range.
//
// filler, when set, names addresses that are never handed out automatically (the .0 and .255
// of avoidBuggyIPs). Runs are then also joined across gaps made only of fillers, which keeps
// the lowest-free search to a bounded number of steps in such pools too.
type runs struct {
	tree   *btree.BTreeG[run]
	filler func(netip.Addr) bool
}

func newRuns(filler func(netip.Addr) bool) *runs {
	return &runs{
		tree:   btree.NewG(16, func(a, b run) bool { return a.first.Less(b.first) }),
		filler: filler,
	}
}

// containing returns the run holding a.
func (s *runs) containing(a netip.Addr) (run, bool) {
	r, ok := s.before(a)
	return r, ok && a.Compare(r.last) <= 0
}

// next returns the first run starting after a.
func (s *runs) next(a netip.Addr) (run, bool) {
	var found run
	ok := false
	s.tree.AscendGreaterOrEqual(run{first: a.Next()}, func(r run) bool {
		found, ok = r, r.first.BitLen() == a.BitLen()
		return false
	})
	return found, ok && a.Next().IsValid()
}

// joinable reports whether the addresses strictly between a and b (a < b) are all fillers,
// or there are none.
func (s *runs) joinable(a, b netip.Addr) bool {
	x := a.Next()
	for range 3 {
		if x == b {
			return true
		}
		if s.filler == nil || !x.IsValid() || !s.filler(x) {
			return false
		}
		x = x.Next()
	}
	return false
}

// add marks a as taken. It may already lie in a run as a filler.
func (s *runs) add(a netip.Addr) {
	if _, ok := s.containing(a); ok {
		return
	}
	merged := run{a, a}
	if left, ok := s.before(a); ok && s.joinable(left.last, a) {
		s.tree.Delete(left)
		merged.first = left.first
	}
	if right, ok := s.next(a); ok && s.joinable(a, right.first) {
		s.tree.Delete(right)
		merged.last = right.last
	}
	s.tree.ReplaceOrInsert(merged)
}

// before returns the last run of a's family starting at or before a.
func (s *runs) before(a netip.Addr) (run, bool) {
	var found run
	ok := false
	s.tree.DescendLessOrEqual(run{first: a}, func(r run) bool {
		found, ok = r, r.first.BitLen() == a.BitLen()
		return false
	})
	return found, ok
}

// remove frees a. Fillers left at the edges of the pieces are dropped; a that is itself a
// filler stays inside its run.
func (s *runs) remove(a netip.Addr) {
	r, ok := s.containing(a)
	if !ok {
		return
	}
	s.tree.Delete(r)
	if s.filler != nil && s.filler(a) {
		s.insertTrimmed(r.first, r.last)
		return
	}
	if a != r.first {
		s.insertTrimmed(r.first, a.Prev())
	}
	if a != r.last {
		s.insertTrimmed(a.Next(), r.last)
	}
}

func (s *runs) insertTrimmed(first, last netip.Addr) {
	for s.filler != nil && first.Compare(last) <= 0 && s.filler(first) {
		first = first.Next()
	}
	for s.filler != nil && first.Compare(last) <= 0 && s.filler(last) {
		last = last.Prev()
	}
	if first.Compare(last) <= 0 {
		s.tree.ReplaceOrInsert(run{first, last})
	}
}

// firstFree returns the lowest address of r that is neither taken nor a filler.
func (s *runs) firstFree(r rules.Range) (netip.Addr, bool) {
	x := r.First
	for {
		for s.filler != nil && x.IsValid() && x.Compare(r.Last) <= 0 && s.filler(x) {
			x = x.Next()
		}
		if !x.IsValid() || x.Compare(r.Last) > 0 {
			return netip.Addr{}, false
		}
		taken, ok := s.containing(x)
		if !ok {
			return x, true
		}
		x = taken.last.Next()
	}
}

package membership

import (
	"slices"
	"testing"
)

func TestRing(t *testing.T) {
	for _, c := range []struct {
		names         []string
		name          string
		after, before []string
	}{
		{[]string{"a"}, "a", nil, nil},
		{[]string{"b", "a"}, "a", []string{"b"}, []string{"b"}},
		{[]string{"c", "a", "b"}, "a", []string{"b", "c"}, []string{"c", "b"}},
		{[]string{"a", "b", "c", "d", "e"}, "a", []string{"b", "c"}, []string{"e", "d"}},
		{[]string{"a", "b", "c", "d", "e"}, "d", []string{"e", "a"}, []string{"c", "b"}},
		{[]string{"a", "b", "c"}, "x", nil, nil},
	} {
		r := newRing(c.names)
		if got := r.after(c.name); !slices.Equal(got, c.after) {
			t.Errorf("%v after %s = %v, want %v", c.names, c.name, got, c.after)
		}
		if got := r.before(c.name); !slices.Equal(got, c.before) {
			t.Errorf("%v before %s = %v, want %v", c.names, c.name, got, c.before)
		}
	}
}

// TestAWrongNoticeUndoesItself: a death notice about a member whose process lives (a watcher cut
// off from it alone) counts it dead only until this node's own check finds its kernel accepting.
func TestAWrongNoticeUndoesItself(t *testing.T) {
	gs := startGroup(t, "a", "b", "c", "d")
	a, d := gs["a"], gs["d"] // d does not watch a (b and c do), so hears no heartbeat of it
	d.heardOfDeath("a", string(a.life))
	if d.IsAlive("a") {
		t.Fatal("a notice did not count a dead")
	}
	waitAlive(t, d, []string{"a", "b", "c", "d"})
	if ch := lastChange(t, d, "a"); !ch.Joined {
		t.Fatalf("a's return was told as %+v", ch)
	}
}

package cluster_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestOwnerTrack: a MAC becomes the owner once it alone answered two rounds in a row; the
// first owner is no move, and rounds with two answers or none change nothing.
func TestOwnerTrack(t *testing.T) {
	for _, c := range []struct {
		rounds string // each round's answers, rounds split by "|", MACs by ","
		moves  int
		owner  string
	}{
		{"a|a", 0, "a"},
		{"a|a|b|b", 1, "b"},
		{"a|a|b|a|b|a", 0, "a"},         // answers alternating: no owner change
		{"a|a|a,b|a,b|b|b|a|a", 2, "a"}, // away and back: two moves
		{"a|a||||b|b", 1, "b"},          // silence while the address moves
		{"a|a|b||b", 1, "b"},            // a silent round between does not break the row
	} {
		var tr ownerTrack
		for _, r := range strings.Split(c.rounds, "|") {
			var macs []string
			if r != "" {
				macs = strings.Split(r, ",")
			}
			tr.see(macs, time.Time{})
		}
		if got := fmt.Sprintf("%d %s", tr.moves, tr.owner); got != fmt.Sprintf("%d %s", c.moves, c.owner) {
			t.Errorf("%s: moves and owner %s, want %d %s", c.rounds, got, c.moves, c.owner)
		}
	}
}

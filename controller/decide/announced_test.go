package decide

import (
	"strings"
	"testing"
	"time"
)

// TestNoLiveSpeakerNamesSorted: the cache lists Speakers in no fixed order; the message names
// them sorted, so it does not change (and cost a status write) from one list to the next.
func TestNoLiveSpeakerNamesSorted(t *testing.T) {
	a := noLiveSpeaker([]string{"stale-b", "stale-a"}, time.Time{})
	b := noLiveSpeaker([]string{"stale-a", "stale-b"}, time.Time{})
	if a != b || !strings.Contains(a, "(stale-a,stale-b;") {
		t.Errorf("messages for the same stale Speakers differ or are unsorted:\n%s\n%s", a, b)
	}
}

package l2

import (
	"net/netip"
	"slices"
	"time"
)

// Subnets are the subnets of the links that answer by default (Decide): where this node can be
// heard answering for an address with no interface named. A link that is down or has lost its
// carrier, or a port of a bond or bridge, brings none.
func Subnets(links []Link) []netip.Prefix {
	out := []netip.Prefix{}
	for i, v := range Decide(links) {
		if v.Answers && !links[i].NoCarrier {
			out = append(out, links[i].Prefixes...)
		}
	}
	slices.SortFunc(out, netip.Prefix.Compare)
	return slices.Compact(out)
}

// HoldDown publishes the subnets a node can answer on: one that goes (its link lost carrier or
// was set down) goes at once, so its addresses move; one that comes (back) only once it has
// stayed for Hold, so a flapping link does not move addresses back and forth. One the others
// never saw go (the node's Speaker status still lists it: its link came back before the status
// could be written, as when the link that was down also carried its way to the apiserver)
// comes back at once: no address moved for it, and holding it back would have this node
// disagree with the others about where it can answer.
type HoldDown struct {
	Hold      time.Duration
	published []netip.Prefix
	since     map[netip.Prefix]time.Time // when each subnet not yet published was first seen
	started   bool
}

// Update takes the subnets seen at now and those the others read for this node (reported: its
// Speaker status; nil when it has none) and returns those published, and when to call again for
// a subnet still held down (zero: none is). The first call publishes what it sees: at start
// there is nothing to flap back from.
func (h *HoldDown) Update(now time.Time, seen, reported []netip.Prefix) (published []netip.Prefix, again time.Time) {
	if !h.started {
		h.started, h.published, h.since = true, slices.Clone(seen), map[netip.Prefix]time.Time{}
		return slices.Clone(h.published), time.Time{}
	}
	kept := []netip.Prefix{}
	for _, p := range seen {
		if slices.Contains(h.published, p) || slices.Contains(reported, p) {
			kept = append(kept, p)
			delete(h.since, p)
			continue
		}
		first, ok := h.since[p]
		if !ok {
			first, h.since[p] = now, now
		}
		if now.Sub(first) >= h.Hold {
			kept = append(kept, p)
			delete(h.since, p)
		} else if at := first.Add(h.Hold); again.IsZero() || at.Before(again) {
			again = at
		}
	}
	for p := range h.since {
		if !slices.Contains(seen, p) {
			delete(h.since, p) // gone again before its hold ended: its clock starts over
		}
	}
	slices.SortFunc(kept, netip.Prefix.Compare)
	h.published = kept
	return slices.Clone(kept), again
}

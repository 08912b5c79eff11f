package election

import (
	"net/netip"
	"slices"
	"time"
)

// Holder is a node that says, in its Speaker status, that it answers for an address, and since
// when.
type Holder struct {
	Node  string
	Since time.Time
}

// Sticky returns the node among nodes (those the owner is elected from, Preferred applied) that
// answers for ip: a holder among them, so that an address stays where it is while its holder
// may keep it, and a node rejoining takes nothing back; of several, the one that took it last
// (ties: Owner among them), so a stale claim (a speaker killed without clearing its status) and
// the other side of a healed partition give way to the latest takeover. With no holder among
// nodes, Owner's choice among them. False when nodes is empty.
func Sticky(ip netip.Addr, nodes []string, holders []Holder) (string, bool) {
	var last []string
	var latest time.Time
	for _, h := range holders {
		if !slices.Contains(nodes, h.Node) {
			continue
		}
		switch {
		case len(last) == 0 || h.Since.After(latest):
			last, latest = append(last[:0], h.Node), h.Since
		case h.Since.Equal(latest):
			last = append(last, h.Node)
		}
	}
	if len(last) > 0 {
		return Owner(ip, last)
	}
	return Owner(ip, nodes)
}

package membership

import "slices"

// Who watches whom. Sending every other member a heartbeat costs each member a packet per
// member per heartbeat, so a hundred nodes would each send and receive 2000 packets a second.
// Instead the live members stand on a ring in name order and each sends its heartbeats only to
// the watchers members after it; those watch it (watch.go) and, when they find it dead, tell
// every other member at once (a death notice, one packet each), so that the node that takes
// its addresses over, wherever it stands, acts as soon as a watcher knew. Each member's cost
// no longer grows with the group; memberlist's own probes remain for anything the watchers miss.
const watchers = 2

// ring is the names of the members on the ring, sorted, this node's included.
type ring []string

func newRing(names []string) ring {
	r := slices.Clone(names)
	slices.Sort(r)
	return slices.Compact(r)
}

// after lists the up to watchers members that follow name on the ring: the ones it sends its
// heartbeats to.
func (r ring) after(name string) []string { return r.around(name, 1) }

// before lists the up to watchers members that precede name on the ring: the ones it watches.
func (r ring) before(name string) []string { return r.around(name, -1) }

func (r ring) around(name string, step int) []string {
	at, ok := slices.BinarySearch(r, name)
	if !ok {
		return nil
	}
	var out []string
	for i := 1; i <= min(watchers, len(r)-1); i++ {
		out = append(out, r[((at+step*i)%len(r)+len(r))%len(r)])
	}
	return out
}

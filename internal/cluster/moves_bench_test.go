package cluster_test

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
)

// homeLabAddresses are the L2 addresses homeLab's four apps get, in their order.
var homeLabAddresses = []netip.Addr{
	netip.MustParseAddr("10.0.0.200"), netip.MustParseAddr("10.0.0.201"),
	netip.MustParseAddr("10.0.0.202"), netip.MustParseAddr("10.0.0.203"),
}

// An ownerTrack follows who answers ARP for one address, one round of asking at a time. A MAC
// becomes the owner once it alone answered two rounds in a row, so the few milliseconds in
// which the old and the new owner both answer (or a round that caught only one of them) do
// not count as moves back and forth (a silent round between two alike does not break the
// row: the address is on its way); the first owner seen is no move.
type ownerTrack struct {
	owner, candidate string
	streak           int
	since, movedAt   time.Time // when the candidate first answered alone; when the last move began
	moves            int
	both, silent     int // rounds in which two MACs answered, or none
}

// see takes the answers (the distinct MACs) of the round asked at now and reports whether the
// owner changed.
func (t *ownerTrack) see(macs []string, now time.Time) bool {
	switch len(macs) {
	case 0:
		t.silent++
		return false
	case 1:
	default:
		t.both++
		return false
	}
	m := macs[0]
	if m == t.owner {
		t.candidate, t.streak = "", 0
		return false
	}
	if m != t.candidate {
		t.candidate, t.streak, t.since = m, 0, now
	}
	t.streak++
	if t.streak < 2 {
		return false
	}
	if t.owner != "" {
		t.moves++
	}
	t.owner, t.candidate, t.streak, t.movedAt = m, "", 0, t.since
	return true
}

// ownerWatch asks every 25 ms, from a machine of its own on the LAN (so the client's neighbour
// table is never touched), who answers ARP for each address, and counts each address's moves
// from one node to another (ownerTrack). Gratuitous ARPs seen during a round count as answers.
type ownerWatch struct {
	asker *netlab.ARPAsker
	names map[string]string // MAC → node name, for the log
	done  chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	tracks  map[netip.Addr]*ownerTrack
	events  []string
	unquiet time.Time // the last round in which an address moved, was about to, or had two answering
}

// observer is the LAN machine ownerWatch asks from, added to the cluster on first use.
func (e *labEnv) observer() netlab.Host {
	if e.observerHost.NS == "" {
		h, err := e.c.AddLANHost("observer", "02:00:00:00:00:04", "10.0.0.4/24", "2001:db8:1::4/64")
		if err != nil {
			e.t.Fatal(err)
		}
		e.observerHost = h
	}
	return e.observerHost
}

func watchOwners(e *labEnv, addrs []netip.Addr) *ownerWatch {
	w := &ownerWatch{names: map[string]string{}, done: make(chan struct{}), tracks: map[netip.Addr]*ownerTrack{}}
	for _, n := range e.c.Nodes {
		w.names[n.MAC.String()] = n.Name
	}
	for _, a := range addrs {
		w.tracks[a] = &ownerTrack{}
	}
	var err error
	if w.asker, err = netlab.NewARPAsker(e.observer()); err != nil {
		e.t.Fatal(err)
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer w.asker.Close()
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			w.round(addrs)
		}
	}()
	return w
}

// round asks for every address and reads the answers for 20 ms.
func (w *ownerWatch) round(addrs []netip.Addr) {
	asked := time.Now()
	w.asker.Ask(addrs...)
	answers := map[netip.Addr][]string{}
	w.asker.Answers(asked.Add(20*time.Millisecond), func(ip netip.Addr, mac string, _ bool) bool {
		if _, watched := w.tracks[ip]; watched && !slices.Contains(answers[ip], mac) {
			answers[ip] = append(answers[ip], mac)
		}
		return true
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range addrs {
		t := w.tracks[a]
		from := t.owner
		moved := t.see(answers[a], asked)
		if moved || t.candidate != "" || len(answers[a]) > 1 {
			w.unquiet = asked
		}
		if moved && from != "" {
			w.events = append(w.events, fmt.Sprintf("%s %s → %s at %s", a, w.names[from], w.names[t.owner], t.movedAt.Format("15:04:05.000")))
		}
	}
}

// settle waits until every address has an owner, then forgets the moves and rounds so far.
func (w *ownerWatch) settle(e *labEnv) {
	waitFor(e.t, "one node answering for each address, from the observer", time.Minute, func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		var none []string
		for a, t := range w.tracks {
			if t.owner == "" {
				none = append(none, a.String())
			}
		}
		return len(none) == 0, "no owner yet for " + strings.Join(none, ", ")
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.tracks {
		t.moves, t.both, t.silent = 0, 0, 0
	}
	w.events = nil
}

// quietSince is when the owners last moved, were about to, or two answered at once.
func (w *ownerWatch) quietSince() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unquiet
}

// stop ends the watch and returns each address's moves, with what was seen for the log.
func (w *ownerWatch) stop() (map[netip.Addr]int, string) {
	close(w.done)
	w.wg.Wait()
	moves := map[netip.Addr]int{}
	var b strings.Builder
	for a, t := range w.tracks {
		moves[a] = t.moves
	}
	for _, a := range slices.SortedFunc(maps.Keys(w.tracks), netip.Addr.Compare) {
		t := w.tracks[a]
		fmt.Fprintf(&b, "%s: %d moves, now on %s, %d rounds with two answering, %d with none; ", a, t.moves, w.names[t.owner], t.both, t.silent)
	}
	b.WriteString(strings.Join(w.events, "; "))
	return moves, b.String()
}

// A nextHopWatch reads the router's next hops to a BGP address every 10 ms: how often the set
// changed (each change rehashes some flows to another node), and the fewest it had.
type nextHopWatch struct {
	done   chan struct{}
	result chan [2]int

	mu      sync.Mutex
	changed time.Time // the last change
}

func watchNextHops(e *labEnv, routerNS string, ip netip.Addr) *nextHopWatch {
	w := &nextHopWatch{done: make(chan struct{}), result: make(chan [2]int)}
	go func() {
		least, changes, last := len(e.c.Nodes), 0, ""
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				w.result <- [2]int{changes, least}
				return
			case <-tick.C:
			}
			via, err := netlab.Gateways(routerNS, netip.PrefixFrom(ip, 32))
			if err != nil {
				continue
			}
			least = min(least, len(via))
			if now := fmt.Sprint(via); now != last {
				if last != "" {
					changes++
					w.mu.Lock()
					w.changed = time.Now()
					w.mu.Unlock()
				}
				last = now
			}
		}
	}()
	return w
}

// quietSince is when the next hops last changed.
func (w *nextHopWatch) quietSince() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// stop returns how many times the next hops changed and the fewest seen.
func (w *nextHopWatch) stop() (changes, fewest int) {
	close(w.done)
	r := <-w.result
	return r[0], r[1]
}

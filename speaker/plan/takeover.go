package plan

import (
	"net/netip"
	"time"

	"github.com/portico-lb/portico/rules"
)

// Takeover is an address this node took over while the node that answered for it before
// stays: the hand-off (package handoff) passes the flows of the address that this node has no
// state for to that node, so that the clients' open connections survive the move. A takeover
// starts when this node takes an address over from a node that is still there (its Node exists
// and is not NotReady), and ends when its node is gone or NotReady, or no node answers for the
// address, or Linger after that node answers for the address again.
type Takeover struct {
	Via  netip.Addr // the previous owner's node address, where the flows go
	Node string     // that node; "" for one an earlier run left, until the first plan
	// Until is when new flows stop being picked up (zero: unknown, or over); Back since when
	// Node has answered for the address again (zero: it does not).
	Until time.Time
	Back  time.Time
}

// TakeoverTimes are the hand-off's durations: new flows are picked up for Grace after the move,
// and a takeover outlives its node's answering for the address again by Linger.
type TakeoverTimes struct {
	Grace, Linger time.Duration
}

// TakeoverSteps is what one pass does to the takeovers: End removes each from the hand-off (one
// whose removal fails is kept as it is, to try again), Keep are the others as they are now,
// Start sets each in the hand-off (one that fails is not kept). NoAddress are addresses taken
// over from a node without an InternalIP of their family, which cannot be handed off; LingerEnds
// is when the earliest linger ends, and with it a takeover (zero: none lingers).
type TakeoverSteps struct {
	Keep       map[netip.Addr]Takeover
	End        map[netip.Addr]Takeover
	Start      map[netip.Addr]Takeover
	NoAddress  map[netip.Addr]string
	LingerEnds time.Time
}

// Takeovers decides, after a plan, what becomes of the takeovers held (those this node has),
// now: for each address of touched this node starts answering for, taken from another node,
// whether a takeover starts; for each held one, whether it ends, lingers or goes on. subnets are
// this node's own (from its links, nil when not followed): a takeover's node address is one on
// them when the previous owner has one (NodeAddressFor). It reads the Nodes of the latest
// Replan: every change to a Node plans everything again.
func (pl *Planner) Takeovers(held map[netip.Addr]Takeover, touched []netip.Addr, subnets []netip.Prefix, now time.Time, t TakeoverTimes) TakeoverSteps {
	var gained []netip.Addr
	for _, ip := range touched {
		if prev := pl.previous[ip]; pl.owners[ip] == pl.me && prev != "" && prev != pl.me {
			gained = append(gained, ip)
		}
	}
	steps := TakeoverSteps{Keep: map[netip.Addr]Takeover{}}
	if len(gained) == 0 && len(held) == 0 {
		return steps
	}
	byName, byIP := pl.fitNodeAddresses()
	for ip, e := range held {
		pl.keepOrEnd(&steps, ip, e, byIP, now, t.Linger)
	}
	for _, ip := range gained {
		prev := pl.previous[ip]
		ips, fit := byName[prev]
		if e, had := steps.Keep[ip]; !fit || had && e.Node == prev && e.Back.IsZero() {
			// Gone or unfit, or handed off to it already. A takeover that lingered (prev
			// answered meanwhile) starts again: a new move, whose flows must be picked up
			// for a new grace (its element expires, and on the kubelet cluster it did, after
			// ten minutes of moves back and forth every few seconds: every flow reset).
			continue
		}
		via, ok := NodeAddressFor(ip, ips, subnets)
		if !ok {
			steps.NoAddress = mapWith(steps.NoAddress, ip, prev)
			continue
		}
		steps.Start = mapWith(steps.Start, ip, Takeover{Via: via, Node: prev, Until: now.Add(t.Grace)})
	}
	return steps
}

// keepOrEnd puts takeover e of ip in steps: kept (as it is now), or ended; byIP are the fit
// nodes' addresses.
func (pl *Planner) keepOrEnd(steps *TakeoverSteps, ip netip.Addr, e Takeover, byIP map[netip.Addr]string, now time.Time, linger time.Duration) {
	node, there := byIP[e.Via]
	owner := pl.owners[ip]
	switch {
	case there && owner != "" && owner != node:
		e.Node = node // adopted takeovers come without it
		if owner != pl.me {
			e.Back = time.Time{} // moved on to a third node: no linger to count
		}
		steps.Keep[ip] = e // taken back during the linger (Back kept): a new takeover follows
		return
	case there && owner == node:
		if e.Back.IsZero() {
			e.Back = now
		}
		if ends := e.Back.Add(linger); now.Before(ends) {
			if steps.LingerEnds.IsZero() || ends.Before(steps.LingerEnds) {
				steps.LingerEnds = ends
			}
			steps.Keep[ip] = e
			return
		}
	}
	steps.End = mapWith(steps.End, ip, e)
}

// mapWith is m with k set to v, made when nil.
func mapWith[V any](m map[netip.Addr]V, k netip.Addr, v V) map[netip.Addr]V {
	if m == nil {
		m = map[netip.Addr]V{}
	}
	m[k] = v
	return m
}

// fitNodeAddresses are the InternalIPs of each Node that is neither NotReady nor without its
// network (its conntrack entries may be gone with it, or out of reach), and the node each
// address is of.
func (pl *Planner) fitNodeAddresses() (map[string][]netip.Addr, map[netip.Addr]string) {
	byName := map[string][]netip.Addr{}
	byIP := map[netip.Addr]string{}
	for i := range pl.w.Nodes {
		n := &pl.w.Nodes[i]
		if rules.FitnessOf(n).Unfit() {
			continue
		}
		ips := rules.InternalIPs(n)
		byName[n.Name] = ips
		for _, ip := range ips {
			byIP[ip] = n.Name
		}
	}
	return byName, byIP
}

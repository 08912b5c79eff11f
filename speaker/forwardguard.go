package speaker

import (
	"net/netip"
	"slices"

	"github.com/portico-lb/portico/speaker/plan"
)

// Guard keeps this node from routing the untranslated traffic of the addresses it announces
// back out (package guard), so that a client whose first packets arrive before the node's
// service proxy has a rule for a new address connects on its next retransmission. Addresses
// are added before the node announces them and removed once it has withdrawn them. A nil Guard
// leaves the node without one (no CAP_NET_ADMIN, no nf_tables, the scale simulation).
type Guard interface {
	Add(addrs []netip.Addr) error
	Remove(addrs []netip.Addr) error
	Close() error
}

// touched are the addresses whose L2 claim or BGP route the changes may start or stop.
func (s *Speaker) touched(ch plan.Changes, p plan.Plan) []netip.Addr {
	if ch.All {
		return append(keysOf(p.Mine, s.owned), keysOf(p.Routed, s.routed)...)
	}
	return append(slices.Clone(ch.Mine), ch.Routed...)
}

// guard brings the Guard's addresses up to date for those of addrs the plan announces
// (announced) or no longer announces (!announced); a failure is logged and changes nothing else.
func (s *Speaker) guard(addrs []netip.Addr, p plan.Plan, announced bool) {
	if s.Guard == nil || len(addrs) == 0 {
		return
	}
	var pick []netip.Addr
	for _, ip := range addrs {
		_, l2 := p.Mine[ip]
		_, routed := p.Routed[ip]
		if (l2 || routed) == announced {
			pick = append(pick, ip)
		}
	}
	update := s.Guard.Remove
	if announced {
		update = s.Guard.Add
	}
	if err := update(pick); err != nil {
		s.Log.Error(err, "updating the forwarding guard", "addresses", len(pick))
	}
}

package speaker

import (
	"net/netip"
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

// guard has the Guard take addrs (announced: before the node announces them) or let them go
// (once withdrawn); a failure is logged and changes nothing else.
func (s *Speaker) guard(addrs []netip.Addr, announced bool) {
	if s.Guard == nil || len(addrs) == 0 {
		return
	}
	update := s.Guard.Remove
	if announced {
		update = s.Guard.Add
	}
	if err := update(addrs); err != nil {
		s.Log.Error(err, "updating the forwarding guard", "addresses", len(addrs))
	}
}

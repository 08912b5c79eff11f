package speaker

import (
	"context"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/bgp"
	"github.com/portico-lb/portico/speaker/plan"
)

// routesChanged runs after the BGP routes were applied: for each address whose claim changed
// it logs whether this node starts or stops advertising it, tells its Service by an event when
// it starts (if it is the teller), and remembers the claim.
func (s *Speaker) routesChanged(ctx context.Context, now map[netip.Addr]plan.BGPClaim, changed []netip.Addr, cause string) {
	for _, ip := range changed {
		c, routed := now[ip]
		old, had := s.routed[ip]
		if !routed {
			if had {
				s.Log.Info("withdrawn from BGP", "ip", ip, "services", old.Services, "cause", cause)
				delete(s.routed, ip)
			}
			continue
		}
		if !had || !slices.Equal(old.Peers, c.Peers) {
			s.Log.Info("advertising over BGP", "ip", ip, "services", c.Services, "peers", c.Peers, "cause", cause)
		}
		// Only the teller tells, so one event stands for every advertising node.
		if c.Teller && (!had || !old.Teller || !slices.Equal(old.Peers, c.Peers)) {
			s.event(ctx, c.Services, "advertising %s to BGP peers %s (told by node %s for every node that advertises it)", ip, strings.Join(c.Peers, ","), s.Node)
		}
		s.routed[ip] = c
	}
}

// sessionChanged runs when a BGP session changes state: it logs, counts, tells the BGPPeer by
// an event when the session goes up or down, and refreshes the Speaker status.
func (s *Speaker) sessionChanged(ctx context.Context, before, after bgp.State) {
	s.Log.Info("BGP session state", "peer", after.Peer, "address", after.Address, "from", before.State, "to", after.State)
	up, wasUp := after.Established(), before.Established()
	if up != wasUp {
		var peer v1alpha1.BGPPeer
		if err := s.Cache.Get(ctx, types.NamespacedName{Name: after.Peer}, &peer); err == nil {
			if up {
				s.events.Eventf(&peer, nil, corev1.EventTypeNormal, "SessionUp", "Peer", "node %s: BGP session with %s established", s.Node, after.Address)
			} else {
				s.events.Eventf(&peer, nil, corev1.EventTypeWarning, "SessionDown", "Peer", "node %s: BGP session with %s down (now %s)", s.Node, after.Address, after.State)
			}
		}
	}
	s.trigger("bgp-session")
}

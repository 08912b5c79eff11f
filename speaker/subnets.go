package speaker

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/l2"
)

// subnetHold is how long a subnet that came back (its link up again) must stay before this node
// may answer on it again (l2.HoldDown): long enough that a flapping link does not move its
// addresses back and forth, short beside how long a link is repaired.
const subnetHold = 2 * time.Second

// watchSubnets keeps the subnets this node can answer on (l2.Subnets, held down) up to date from
// the kernel's link and address updates, until ctx ends: a link that loses its carrier or is
// set down takes its subnets away within milliseconds, and the Speaker status says so; every
// node, this one included, plans again when it reads that status. The first reading is made
// before Start plans.
func (s *Speaker) watchSubnets(ctx context.Context, hold *l2.HoldDown) {
	changed := make(chan struct{}, 1)
	go func() {
		err := l2.WatchLinks(ctx, func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
		if err != nil {
			s.Log.Error(err, "the subnets this node answers on are no longer followed")
		}
	}()
	var again <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-again:
		}
		again = nil
		if at := s.readSubnets(hold); !at.IsZero() {
			again = time.After(time.Until(at))
		}
	}
}

// readSubnets reads the links and publishes the subnets when they changed; it returns when to
// read again for a subnet held down (zero: none is).
func (s *Speaker) readSubnets(hold *l2.HoldDown) time.Time {
	links, err := l2.ReadLinks()
	if err != nil {
		s.Log.Error(err, "reading the links for the subnets this node answers on")
		return time.Time{}
	}
	now, at := hold.Update(time.Now(), l2.Subnets(links), s.reportedSubnets())
	if before := s.reads.subnets.Load(); before == nil || !slices.Equal(*before, now) {
		s.reads.subnets.Store(&now)
		s.Log.Info("subnets this node answers on", "subnets", now)
		s.replanAll("links")
	}
	return at
}

// reportedSubnets are this node's subnets as its Speaker status in the cache lists them, what
// every node plans with (nil: it lists none, or the cache has not read it yet).
func (s *Speaker) reportedSubnets() []netip.Prefix {
	var sp v1alpha1.Speaker
	if s.Cache.Get(context.Background(), types.NamespacedName{Name: s.Node}, &sp) != nil || sp.Status.Subnets == nil {
		return nil
	}
	return rules.ParseSubnets(sp.Status.Subnets)
}

// subnetStrings are the subnets for the Speaker status: nil when they are not followed (a
// recording Announcer), so the others take this node to answer anywhere.
func (s *Speaker) subnetStrings() []string {
	p := s.reads.subnets.Load()
	if p == nil {
		return nil
	}
	out := make([]string, 0, len(*p))
	for _, n := range *p {
		out = append(out, n.String())
	}
	return out
}

// ownSubnets are this node's subnets as its links say, when they are followed.
func (s *Speaker) ownSubnets() ([]netip.Prefix, bool) {
	p := s.reads.subnets.Load()
	if p == nil {
		return nil, false
	}
	return *p, true
}

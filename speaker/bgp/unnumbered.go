package bgp

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/vishvananda/netlink"
)

// routerOn finds the router at the other end of an unnumbered link: the IPv6 link-local
// neighbour on ifname that the kernel marked as a router (it sent a router advertisement, as
// FRR does on interfaces with unnumbered BGP neighbours). It returns the address with ifname as
// its zone. Other hosts on a shared segment are never routers to the node, so they are not
// taken for it; two routers on one link are refused rather than guessed between.
func routerOn(ifname string) (netip.Addr, error) {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("interface %s: %w", ifname, err)
	}
	neighs, err := netlink.NeighList(link.Attrs().Index, netlink.FAMILY_V6)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("reading the IPv6 neighbours on %s: %w", ifname, err)
	}
	var routers []netip.Addr
	for _, n := range neighs {
		a, ok := netip.AddrFromSlice(n.IP)
		if ok && a.IsLinkLocalUnicast() && n.Flags&netlink.NTF_ROUTER != 0 && n.State&(netlink.NUD_FAILED|netlink.NUD_INCOMPLETE) == 0 {
			routers = append(routers, a.WithZone(ifname))
		}
	}
	switch slices.SortFunc(routers, netip.Addr.Compare); len(routers) {
	case 0:
		return netip.Addr{}, fmt.Errorf("waiting for a router advertisement on %s: no IPv6 link-local router there yet", ifname)
	case 1:
		return routers[0], nil
	}
	return netip.Addr{}, fmt.Errorf("%d IPv6 link-local routers on %s (%v): unnumbered peering needs a point-to-point link", len(routers), ifname, routers)
}

// dialUnnumbered waits for the router on the session's interface and then adds it as the
// session's GoBGP neighbour, looking once a second until the session is closed (ctx).
func (s *Sessions) dialUnnumbered(ctx context.Context, ss *session) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		addr, err := routerOn(ss.peer.Interface)
		s.mu.Lock()
		if ctx.Err() != nil || s.running[ss.peer.Name] != ss {
			s.mu.Unlock()
			return
		}
		if err == nil {
			ss.addr, ss.state.Address = addr, addr
			err = ss.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(ss.peer, addr)})
		}
		if err != nil && ss.state.Message != err.Error() {
			s.Log.Info("unnumbered BGP peer not found yet", "peer", ss.peer.Name, "interface", ss.peer.Interface, "reason", err.Error())
		}
		if err == nil {
			ss.state.Message = ""
			s.Log.Info("unnumbered BGP peer found", "peer", ss.peer.Name, "interface", ss.peer.Interface, "address", addr)
		} else {
			ss.state.Message = err.Error()
		}
		s.mu.Unlock()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

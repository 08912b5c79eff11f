package bgp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mdlayher/ndp"
	api "github.com/osrg/gobgp/v4/api"
	"golang.org/x/net/ipv6"
)

// advertiseEvery is how often the node sends its router advertisement on an unnumbered link:
// the router learns the node's link-local address from it (FRR's zebra does), and one sent
// again within seconds covers a router that restarted.
const advertiseEvery = 5 * time.Second

// dialUnnumbered runs an unnumbered session's link until ctx ends (the session is closed). The
// two ends of an unnumbered link find each other by router advertisements (RFC 5549 peers do):
// the node sends one every few seconds (router lifetime 0, so nobody takes the node for a
// default router) and a solicitation at the start, and the first advertisement heard from the
// router gives the address to open the session to, on that interface.
func (s *Sessions) dialUnnumbered(ctx context.Context, ss *session) {
	ifname := ss.peer.Interface
	var conn *ndp.Conn
	for conn == nil {
		var err error
		if conn, err = listenNDP(ifname); err != nil {
			s.noRouterYet(ss, err)
			if !sleep(ctx, time.Second) {
				return
			}
		}
	}
	defer conn.Close()
	go func() { <-ctx.Done(); conn.Close() }() // unblocks ReadFrom
	go s.advertise(ctx, conn, ss)
	s.noRouterYet(ss, fmt.Errorf("waiting for a router advertisement on %s", ifname))
	for {
		msg, _, from, err := conn.ReadFrom()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.noRouterYet(ss, fmt.Errorf("reading router advertisements on %s: %w", ifname, err))
			if !sleep(ctx, time.Second) {
				return
			}
			continue
		}
		if _, ok := msg.(*ndp.RouterAdvertisement); !ok || !from.IsLinkLocalUnicast() {
			continue
		}
		if s.addUnnumbered(ctx, ss, from.WithZone(ifname)) {
			break
		}
	}
	<-ctx.Done() // keep advertising for the life of the session
}

func listenNDP(ifname string) (*ndp.Conn, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", ifname, err)
	}
	conn, _, err := ndp.Listen(ifi, ndp.LinkLocal)
	if err != nil {
		return nil, fmt.Errorf("listening for router advertisements on %s (it needs an IPv6 link-local address): %w", ifname, err)
	}
	var f ipv6.ICMPFilter
	f.SetAll(true)
	f.Accept(ipv6.ICMPTypeRouterAdvertisement)
	if err := conn.SetICMPFilter(&f); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// advertise sends a router solicitation once and the node's router advertisement every
// advertiseEvery until ctx ends.
func (s *Sessions) advertise(ctx context.Context, conn *ndp.Conn, ss *session) {
	ifi, err := net.InterfaceByName(ss.peer.Interface)
	if err != nil {
		return
	}
	src := []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: ifi.HardwareAddr}}
	_ = conn.WriteTo(&ndp.RouterSolicitation{Options: src}, nil, netip.IPv6LinkLocalAllRouters())
	for {
		err := conn.WriteTo(&ndp.RouterAdvertisement{CurrentHopLimit: 64, Options: src}, nil, netip.IPv6LinkLocalAllNodes())
		if err != nil && ctx.Err() == nil {
			s.Log.V(1).Info("sending a router advertisement", "interface", ss.peer.Interface, "error", err.Error())
		}
		if !sleep(ctx, advertiseEvery) {
			return
		}
	}
}

// addUnnumbered adds the router found at addr as the session's GoBGP neighbour.
func (s *Sessions) addUnnumbered(ctx context.Context, ss *session, addr netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Err() != nil || s.running[ss.peer.Name] != ss {
		return true
	}
	if err := ss.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(ss.peer, addr, true)}); err != nil {
		ss.state.Message = fmt.Sprintf("adding the router %s found on %s: %v", addr, ss.peer.Interface, err)
		return false
	}
	ss.addr, ss.state.Address, ss.state.Message = addr, addr, ""
	s.Log.Info("unnumbered BGP peer found", "peer", ss.peer.Name, "interface", ss.peer.Interface, "address", addr)
	return true
}

// noRouterYet reports why an unnumbered session has no neighbour yet.
func (s *Sessions) noRouterYet(ss *session, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss.state.Message != err.Error() {
		ss.state.Message = err.Error()
		s.Log.Info("unnumbered BGP peer not found yet", "peer", ss.peer.Name, "reason", err.Error())
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

package bgp

import (
	"context"
	"net/netip"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/config/oc"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/portico-lb/portico/speaker/plan"
)

var (
	apiFamilyV4 = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	apiFamilyV6 = &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
	// unicastFamilies are the same two as the global RIB's families, which GoBGP numbers by
	// its OpenConfig enumeration.
	unicastFamilies = []uint32{uint32(oc.AfiSafiTypeToIntMap[oc.AFI_SAFI_TYPE_IPV4_UNICAST]), uint32(oc.AfiSafiTypeToIntMap[oc.AFI_SAFI_TYPE_IPV6_UNICAST])}
)

func familyOf(a netip.Addr) bgp.Family {
	if a.Is4() {
		return bgp.RF_IPv4_UC
	}
	return bgp.RF_IPv6_UC
}

func seconds(d time.Duration) uint64 { return uint64(d / time.Second) }

// restartDeferral is how long a restarting session (apiPeer's restarting) waits for the
// router's End-of-RIB before it sends this node's routes anyway: the speaker selects no route
// from what the router sends, so there is nothing to wait for beyond the router's first burst.
const restartDeferral = 1 // seconds

// apiPeer is the GoBGP neighbour for p at addr (p.Address, or the link-local router found on
// p.Interface, zone included: GoBGP then opens the session from the interface's own
// link-local address). Both unicast families are enabled on every session, so IPv6 prefixes
// travel over an IPv4 session and the reverse (MP-BGP).
//
// restarting, with graceful restart on, opens the session as a restarting speaker (RFC 4724
// §4.1): its OPEN sets the Restart State bit and, per family, the Forwarding State bit, so a
// router still holding this node's routes from before (stale, after a planned restart or a
// crash) keeps them until the End-of-RIB that follows this session's routes, then sweeps those
// not sent again. Without the Forwarding State bit it drops them as the session opens and takes
// them back from the UPDATE that follows (bird: its kernel ECMP route lost the node for 1.1 ms,
// enough to rehash flows). The bit is true: the node's forwarding (kube-proxy) never stopped,
// only the speaker did.
func apiPeer(p plan.Peer, addr netip.Addr, restarting bool) *api.Peer {
	ap := &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: addr.String(), PeerAsn: p.PeerASN, LocalAsn: p.MyASN,
			AuthPassword: string(p.Password), Description: p.Name},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry: max(seconds(p.ConnectTime), 1), HoldTime: seconds(p.HoldTime), KeepaliveInterval: seconds(p.KeepaliveTime),
			// After an administrative reset GoBGP waits this long before reconnecting (30 s by default).
			IdleHoldTimeAfterReset: max(seconds(p.ConnectTime), 1),
		}},
		Transport: &api.Transport{RemotePort: uint32(p.Port)},
	}
	if p.Source.IsValid() {
		ap.Transport.LocalAddress = p.Source.String()
	}
	// Bound to the VRF device (SO_BINDTODEVICE), the session's socket routes by the VRF's table
	// and leaves from one of its interfaces, whose address is then the routes' next hop.
	ap.Transport.BindInterface = p.VRF
	if p.EBGPMultiHop {
		ap.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: 255}
	}
	for _, f := range []*api.Family{apiFamilyV4, apiFamilyV6} {
		// More routes than MaxPrefixes in a family and GoBGP ceases the session (RFC 4486
		// subcode 1) and keeps it down (observe opens it again after prefixLimitRetry).
		as := &api.AfiSafi{Config: &api.AfiSafiConfig{Family: f, Enabled: true},
			PrefixLimits: &api.PrefixLimit{Family: f, MaxPrefixes: p.MaxPrefixes}}
		if p.GracefulRestart {
			as.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
		}
		ap.AfiSafis = append(ap.AfiSafis, as)
	}
	if p.GracefulRestart {
		ap.GracefulRestart = &api.GracefulRestart{Enabled: true, RestartTime: uint32(seconds(p.GracefulRestartTime)),
			LocalRestarting: restarting, DeferralTime: restartDeferral}
	}
	return ap
}

// asTrans stands for a 4-octet AS where only two octets fit (RFC 6793), as in the
// link-bandwidth community.
const asTrans = 23456

// apiPath is r as a GoBGP path originated here by a session in AS myASN.
func apiPath(r plan.Route, myASN uint32) *apiutil.Path {
	fam := familyOf(r.Prefix.Addr())
	nlri, _ := bgp.NewIPAddrPrefix(r.Prefix) // a valid netip.Prefix always makes one
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP)}
	// An unspecified next hop is replaced by the session's local address (eBGP, and locally
	// originated iBGP paths).
	nh := r.Attrs.NextHop
	if !nh.IsValid() {
		nh = netip.IPv4Unspecified()
		if r.Prefix.Addr().Is6() {
			nh = netip.IPv6Unspecified()
		}
	}
	if fam == bgp.RF_IPv4_UC && nh.Is4() {
		a, _ := bgp.NewPathAttributeNextHop(nh) // nh is valid
		attrs = append(attrs, a)
	} else {
		a, _ := bgp.NewPathAttributeMpReachNLRI(fam, []bgp.PathNLRI{{NLRI: nlri}}, nh) // one NLRI: never refused
		attrs = append(attrs, a)
	}
	if r.Attrs.LocalPref != 0 {
		attrs = append(attrs, bgp.NewPathAttributeLocalPref(r.Attrs.LocalPref))
	}
	if len(r.Attrs.Communities) > 0 {
		attrs = append(attrs, bgp.NewPathAttributeCommunities(r.Attrs.Communities))
	}
	if len(r.Attrs.Large) > 0 {
		lcs := make([]*bgp.LargeCommunity, len(r.Attrs.Large))
		for i, c := range r.Attrs.Large {
			lcs[i] = bgp.NewLargeCommunity(c.Global, c.Local1, c.Local2)
		}
		attrs = append(attrs, bgp.NewPathAttributeLargeCommunities(lcs))
	}
	if r.Attrs.LinkBandwidth != 0 {
		as := uint16(asTrans)
		if myASN <= 0xFFFF {
			as = uint16(myASN)
		}
		lb := bgp.NewLinkBandwidthExtended(as, r.Attrs.LinkBandwidth)
		attrs = append(attrs, bgp.NewPathAttributeExtendedCommunities([]bgp.ExtendedCommunityInterface{lb}))
	}
	return &apiutil.Path{Family: fam, Nlri: nlri, Attrs: attrs}
}

// rejectImportsPolicy names the global import policy that keeps every route a peer sends out of
// the RIB: the speaker only advertises, so a router sending it a full table must cost nothing
// beyond GoBGP's per-session Adj-RIB-In.
const rejectImportsPolicy = "portico-advertise-only"

// rejectImports makes srv's global import policy accept only the paths the speaker originates
// (GoBGP runs locally added paths through the import policy too) and reject everything else.
func rejectImports(ctx context.Context, srv *server.BgpServer) error {
	policy := &api.Policy{Name: rejectImportsPolicy, Statements: []*api.Statement{{
		Name:       rejectImportsPolicy + "-local",
		Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
		Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT},
	}}}
	if err := srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: policy}); err != nil {
		return err
	}
	return srv.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Name: "global", Direction: api.PolicyDirection_POLICY_DIRECTION_IMPORT,
		Policies: []*api.Policy{{Name: rejectImportsPolicy}}, DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT,
	}})
}

// stateName is a GoBGP session state as BGP (and the API's status fields) names it.
func stateName(s bgp.FSMState) string {
	switch s {
	case bgp.BGP_FSM_CONNECT:
		return "Connect"
	case bgp.BGP_FSM_ACTIVE:
		return "Active"
	case bgp.BGP_FSM_OPENSENT:
		return "OpenSent"
	case bgp.BGP_FSM_OPENCONFIRM:
		return "OpenConfirm"
	case bgp.BGP_FSM_ESTABLISHED:
		return "Established"
	}
	return "Idle"
}

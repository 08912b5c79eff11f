package bgp

import (
	"net/netip"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

var (
	familyV4 = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	familyV6 = &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
)

func familyOf(a netip.Addr) *api.Family {
	if a.Is4() {
		return familyV4
	}
	return familyV6
}

func seconds(d time.Duration) uint64 { return uint64(d / time.Second) }

// apiPeer is the GoBGP neighbour for p. Both unicast families are enabled on every session, so
// IPv6 prefixes travel over an IPv4 session and the reverse (MP-BGP).
func apiPeer(p Peer) *api.Peer {
	ap := &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: p.Address.String(), PeerAsn: p.PeerASN, LocalAsn: p.MyASN,
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
	if p.EBGPMultiHop {
		ap.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: 255}
	}
	for _, f := range []*api.Family{familyV4, familyV6} {
		as := &api.AfiSafi{Config: &api.AfiSafiConfig{Family: f, Enabled: true}}
		if p.GracefulRestart {
			as.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
		}
		ap.AfiSafis = append(ap.AfiSafis, as)
	}
	if p.GracefulRestart {
		ap.GracefulRestart = &api.GracefulRestart{Enabled: true, RestartTime: 120}
	}
	return ap
}

// apiPath is r as a GoBGP path originated here.
func apiPath(r Route) *api.Path {
	fam := familyOf(r.Prefix.Addr())
	nlri := mustAny(&api.IPAddressPrefix{Prefix: r.Prefix.Addr().String(), PrefixLen: uint32(r.Prefix.Bits())})
	attrs := []*anypb.Any{mustAny(&api.OriginAttribute{Origin: 0})} // IGP
	// An unspecified next hop is replaced by the session's local address (eBGP, and locally
	// originated iBGP paths).
	nh := r.Attrs.NextHop
	if !nh.IsValid() {
		nh = netip.IPv4Unspecified()
		if r.Prefix.Addr().Is6() {
			nh = netip.IPv6Unspecified()
		}
	}
	if fam == familyV4 && nh.Is4() {
		attrs = append(attrs, mustAny(&api.NextHopAttribute{NextHop: nh.String()}))
	} else {
		attrs = append(attrs, mustAny(&api.MpReachNLRIAttribute{Family: fam, NextHops: []string{nh.String()}, Nlris: []*anypb.Any{nlri}}))
	}
	if r.Attrs.LocalPref != 0 {
		attrs = append(attrs, mustAny(&api.LocalPrefAttribute{LocalPref: r.Attrs.LocalPref}))
	}
	if len(r.Attrs.Communities) > 0 {
		attrs = append(attrs, mustAny(&api.CommunitiesAttribute{Communities: r.Attrs.Communities}))
	}
	if len(r.Attrs.Large) > 0 {
		lcs := make([]*api.LargeCommunity, len(r.Attrs.Large))
		for i, c := range r.Attrs.Large {
			lcs[i] = &api.LargeCommunity{GlobalAdmin: c.Global, LocalData1: c.Local1, LocalData2: c.Local2}
		}
		attrs = append(attrs, mustAny(&api.LargeCommunitiesAttribute{Communities: lcs}))
	}
	return &api.Path{Family: fam, Nlri: nlri, Pattrs: attrs}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err) // only for messages of the GoBGP API, which always marshal
	}
	return a
}

// stateName is a GoBGP session state as BGP (and the API's status fields) names it.
func stateName(s api.PeerState_SessionState) string {
	switch s {
	case api.PeerState_IDLE:
		return "Idle"
	case api.PeerState_CONNECT:
		return "Connect"
	case api.PeerState_ACTIVE:
		return "Active"
	case api.PeerState_OPENSENT:
		return "OpenSent"
	case api.PeerState_OPENCONFIRM:
		return "OpenConfirm"
	case api.PeerState_ESTABLISHED:
		return "Established"
	}
	return "Idle"
}

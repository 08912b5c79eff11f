package plan

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules/bfdprofile"
)

// Password is a TCP MD5 password. It prints as "<redacted>" in every format, so a log line or an
// error that includes a Peer never shows it.
type Password string

func (Password) String() string   { return "<redacted>" }
func (Password) GoString() string { return "<redacted>" }

// Peer is one session this node should hold, resolved from a BGPPeer: defaults applied, the
// password read from its Secret.
type Peer struct {
	Name    string     // the BGPPeer's name
	Address netip.Addr // zero for an Interface peer
	// Interface names the point-to-point link of an unnumbered peer: the router is the IPv6
	// link-local neighbour that sends router advertisements on it.
	Interface string
	// VRF names the Linux VRF device the session is bound to; empty: the default VRF.
	VRF            string
	Port           uint16
	MyASN, PeerASN uint32 // PeerASN 0: learned from the router's OPEN
	// ExternalOnly (dynamicASN external): a router that turns out to be in MyASN is refused.
	ExternalOnly    bool
	RouterID        netip.Addr
	Source          netip.Addr // zero: the kernel picks
	HoldTime        time.Duration
	KeepaliveTime   time.Duration
	ConnectTime     time.Duration
	EBGPMultiHop    bool
	GracefulRestart bool
	// GracefulRestartTime is the restart time announced when GracefulRestart is on: how long
	// the router keeps this node's routes, stale, waiting for the session to return.
	GracefulRestartTime time.Duration
	Password            Password
	// BFD: the BFD session that watches this one; zero (DetectMult 0) for none.
	BFD bfdprofile.Config
	// MaxPrefixes: the session is ceased when the router sends more routes than this in one
	// address family.
	MaxPrefixes uint32
}

// wantsBFD reports whether a BFD session watches the BGP session.
func (p Peer) wantsBFD() bool { return p.BFD.DetectMult != 0 }

// iBGP reports whether the session stays inside one AS.
func (p Peer) iBGP() bool { return p.MyASN == p.PeerASN }

// ipv6Session reports whether the session runs over IPv6 (an Interface peer always does).
func (p Peer) ipv6Session() bool { return p.Interface != "" || p.Address.Is6() }

// Where names the router: its address, or the interface of an unnumbered peer.
func (p Peer) Where() string {
	if p.Interface != "" {
		return "interface " + p.Interface
	}
	return p.Address.String()
}

// LargeCommunity is an RFC 8092 community.
type LargeCommunity struct{ Global, Local1, Local2 uint32 }

func (c LargeCommunity) String() string {
	return fmt.Sprintf("large:%d:%d:%d", c.Global, c.Local1, c.Local2)
}

// Attrs are the path attributes of one route to one peer.
type Attrs struct {
	LocalPref   uint32 // 0: none (eBGP, or no advertisement sets it)
	Communities []uint32
	Large       []LargeCommunity
	// NextHop is set when the prefix's family differs from the session's (an IPv6 prefix over
	// an IPv4 session): the node's own address of that family. Zero: the session's local address.
	NextHop netip.Addr
	// LinkBandwidth is the link-bandwidth extended community's value in bytes per second (its
	// AS is the session's own); 0: none.
	LinkBandwidth float32
}

// Equal compares attributes.
func (a Attrs) Equal(b Attrs) bool {
	return a.LocalPref == b.LocalPref && a.LinkBandwidth == b.LinkBandwidth && a.NextHop == b.NextHop && slices.Equal(a.Communities, b.Communities) && slices.Equal(a.Large, b.Large)
}

// Route is one prefix advertised to one peer.
type Route struct {
	Prefix   netip.Prefix
	Attrs    Attrs
	Services []string // namespace/name of the Services it carries, sorted
}

// BGP is the plan's BGP half: everything this node should do over BGP, which package bgp
// applies (Sessions.Apply).
type BGP struct {
	Peers  map[string]Peer                   // by BGPPeer name
	Routes map[string]map[netip.Prefix]Route // by BGPPeer name, then prefix
	// Changed, when not nil, names the only routes that may differ from the last Apply (by
	// BGPPeer name), so a running session compares those and not every route.
	Changed map[string][]netip.Prefix
}

// String renders the state deterministically (transcripts compare it), without passwords.
func (d BGP) String() string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(d.Peers)) {
		writePeer(&b, name, d.Peers[name])
		routes := d.Routes[name]
		prefixes := make([]netip.Prefix, 0, len(routes))
		for pfx := range routes {
			prefixes = append(prefixes, pfx)
		}
		slices.SortFunc(prefixes, comparePrefix)
		for _, pfx := range prefixes {
			writeRoute(&b, pfx, routes[pfx])
		}
	}
	return b.String()
}

// writePeer renders one session's line of BGP.String.
func writePeer(b *strings.Builder, name string, p Peer) {
	peerAS := fmt.Sprint(p.PeerASN)
	if p.ExternalOnly {
		peerAS = "learned (external)"
	}
	fmt.Fprintf(b, "peer %s: %s as %s port %d, my as %d, router-id %s", name, p.Where(), peerAS, p.Port, p.MyASN, p.RouterID)
	if p.Source.IsValid() {
		fmt.Fprintf(b, ", source %s", p.Source)
	}
	if p.VRF != "" {
		fmt.Fprintf(b, ", vrf %s", p.VRF)
	}
	fmt.Fprintf(b, ", hold %v keepalive %v connect %v", p.HoldTime, p.KeepaliveTime, p.ConnectTime)
	if p.EBGPMultiHop {
		b.WriteString(", multihop")
	}
	if p.GracefulRestart {
		fmt.Fprintf(b, ", graceful-restart %v", p.GracefulRestartTime)
	}
	if p.Password != "" {
		b.WriteString(", md5")
	}
	if p.MaxPrefixes != v1alpha1.DefaultMaxPrefixes {
		fmt.Fprintf(b, ", max-prefixes %d", p.MaxPrefixes)
	}
	if p.wantsBFD() {
		fmt.Fprintf(b, ", bfd tx %v rx %v x%d", p.BFD.DesiredMinTx, p.BFD.RequiredMinRx, p.BFD.DetectMult)
		if p.BFD.Passive {
			b.WriteString(" passive")
		}
		if p.BFD.Hops.Multihop {
			fmt.Fprintf(b, " multihop min-ttl %d", p.BFD.Hops.MinTTL)
		}
		if a := p.BFD.Auth; a.Type != bfdprofile.AuthNone {
			fmt.Fprintf(b, " %v key-id %d", a.Type, a.KeyID)
		}
	}
	b.WriteString("\n")
}

// writeRoute renders one route's line of BGP.String.
func writeRoute(b *strings.Builder, pfx netip.Prefix, r Route) {
	fmt.Fprintf(b, "  %s", pfx)
	if r.Attrs.NextHop.IsValid() {
		fmt.Fprintf(b, " nexthop %s", r.Attrs.NextHop)
	}
	if r.Attrs.LocalPref != 0 {
		fmt.Fprintf(b, " local-pref %d", r.Attrs.LocalPref)
	}
	for _, c := range r.Attrs.CommunityStrings() {
		fmt.Fprintf(b, " %s", c)
	}
	if r.Attrs.LinkBandwidth != 0 {
		fmt.Fprintf(b, " link-bandwidth %.0f bytes/s", r.Attrs.LinkBandwidth)
	}
	fmt.Fprintf(b, " (%s)\n", strings.Join(r.Services, ", "))
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

package bgp

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/osrg/gobgp/v4/pkg/packet/bgp"

	"github.com/portico-lb/portico/speaker/plan"
)

// TestPasswordReachesGoBGP: the password a Peer never prints goes to GoBGP as it is.
func TestPasswordReachesGoBGP(t *testing.T) {
	p := plan.Peer{Name: "tor", Address: netip.MustParseAddr("198.51.100.1"), Password: "s3cret"}
	if string(apiPeer(p, p.Address, false).Conf.AuthPassword) != "s3cret" {
		t.Fatal("the password does not reach GoBGP")
	}
}

// TestAPIPath: next hops and attributes as GoBGP gets them.
func TestAPIPath(t *testing.T) {
	v6 := apiPath(plan.Route{Prefix: netip.MustParsePrefix("2001:db8:ff::10/128"), Attrs: plan.Attrs{NextHop: netip.MustParseAddr("2001:db8:1::11"), LocalPref: 200,
		Communities: []uint32{1}, Large: []plan.LargeCommunity{{Global: 1, Local1: 2, Local2: 3}}}}, 64513)
	if v6.Family != bgp.RF_IPv6_UC || len(v6.Attrs) != 5 || !strings.Contains(v6.Attrs[1].String(), "2001:db8:1::11") {
		t.Fatalf("IPv6 path %v %v", v6.Nlri, v6.Attrs)
	}
	v4 := apiPath(plan.Route{Prefix: netip.MustParsePrefix("203.0.113.10/32")}, 64513)
	if v4.Family != bgp.RF_IPv4_UC || len(v4.Attrs) != 2 || !strings.Contains(v4.Attrs[1].String(), "0.0.0.0") || v4.Nlri.String() != "203.0.113.10/32" {
		t.Fatalf("IPv4 path %v %v", v4.Nlri, v4.Attrs)
	}
}

// TestLinkBandwidthCommunity: a weighted route carries the non-transitive link-bandwidth
// extended community (type 0x40, subtype 0x04) with the session's AS, AS_TRANS for a 4-octet
// one, and the float32 bandwidth in bytes per second.
func TestLinkBandwidthCommunity(t *testing.T) {
	r := plan.Route{Prefix: netip.MustParsePrefix("203.0.113.10/32"), Attrs: plan.Attrs{LinkBandwidth: 2 * plan.BandwidthPerEndpoint}}
	for _, c := range []struct {
		myASN uint32
		want  []byte
	}{
		{64513, []byte{0x40, 0x04, 0xfc, 0x01, 0x48, 0x74, 0x24, 0x00}}, // 250000 = 0x48742400
		{4200000000, []byte{0x40, 0x04, 0x5b, 0xa0, 0x48, 0x74, 0x24, 0x00}},
	} {
		path := apiPath(r, c.myASN)
		ext, ok := path.Attrs[len(path.Attrs)-1].(*bgp.PathAttributeExtendedCommunities)
		if !ok || len(ext.Value) != 1 {
			t.Fatalf("AS %d: no extended communities in %v", c.myASN, path.Attrs)
		}
		got, err := ext.Value[0].Serialize()
		if err != nil || string(got) != string(c.want) {
			t.Fatalf("AS %d: community % x (%v), want % x", c.myASN, got, err, c.want)
		}
	}
	if path := apiPath(plan.Route{Prefix: r.Prefix}, 64513); len(path.Attrs) != 2 {
		t.Fatalf("an unweighted route has attributes %v", path.Attrs)
	}
}

// TestVRFBindsTheSession: a peer's vrf is the device GoBGP binds the session's socket to
// (SO_BINDTODEVICE); none without.
func TestVRFBindsTheSession(t *testing.T) {
	p := plan.Peer{Name: "red", Address: netip.MustParseAddr("192.0.2.1"), VRF: "vrf-red"}
	if got := apiPeer(p, p.Address, false).Transport.BindInterface; got != "vrf-red" {
		t.Fatalf("bound to %q, want vrf-red", got)
	}
	p.VRF = ""
	if got := apiPeer(p, p.Address, false).Transport.BindInterface; got != "" {
		t.Fatalf("a peer without vrf bound to %q", got)
	}
}

package l2

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/ipv6"
)

// naFrame wraps an ICMPv6 message from src (MAC srcMAC, address srcIP) to ff02::1 in IPv6 and
// Ethernet, as a host answering a DAD probe sends it.
func naFrame(t testing.TB, srcMAC net.HardwareAddr, srcIP netip.Addr, m ndp.Message, hopLimit byte) []byte {
	return naFrameTo(t, srcMAC, srcIP, allNodes, m, hopLimit)
}

// TestNDPProbeRoundTrip: the DAD probe is a solicitation from :: to the solicited-node group
// (hop limit 255, no source link-layer address) that the responder answers to all nodes, and
// the answer is read back as the owner's MAC; an answer for another address, with a hop limit
// below 255, our own frame, the probe itself and garbage are not.
func TestNDPProbeRoundTrip(t *testing.T) {
	prober, _ := net.ParseMAC("02:00:00:00:00:01")
	owner, _ := net.ParseMAC("02:00:00:00:00:02")
	ip := netip.MustParseAddr("2001:db8::200")
	ownerLL := netip.MustParseAddr("fe80::2")
	probe := NDPProbe(prober, ip)

	var eth ethernet.Frame
	if err := eth.UnmarshalBinary(probe); err != nil {
		t.Fatal(err)
	}
	if eth.Destination.String() != "33:33:ff:00:02:00" || eth.EtherType != etherTypeIPv6 {
		t.Fatalf("probe to %v type %v, want the solicited-node group's MAC 33:33:ff:00:02:00, IPv6", eth.Destination, eth.EtherType)
	}
	h, err := ipv6.ParseHeader(eth.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Src.IsUnspecified() || h.Dst.String() != "ff02::1:ff00:200" || h.HopLimit != 255 || h.NextHeader != protoICMPv6 {
		t.Errorf("probe header %+v, want :: to ff02::1:ff00:200, hop limit 255, ICMPv6", h)
	}
	body := eth.Payload[ipv6HeaderLen:]
	m, err := ndp.ParseMessage(body)
	if ns, ok := m.(*ndp.NeighborSolicitation); err != nil || !ok || ns.TargetAddress != ip || len(ns.Options) != 0 {
		t.Fatalf("probe message %#v (%v), want a solicitation for %v with no options", m, err, ip)
	}
	if sum, err := ndp.MarshalMessageChecksum(m, netip.IPv6Unspecified(), netip.MustParseAddr("ff02::1:ff00:200")); err != nil || !bytes.Equal(sum, body) {
		t.Errorf("probe checksum wrong: %x, want %x", body, sum)
	}

	na, dst, ok := naFor(body, netip.IPv6Unspecified(), 255, owner, func(a netip.Addr) bool { return a == ip })
	if !ok || dst != allNodes {
		t.Fatalf("the responder does not answer the probe to all nodes (ok %v, to %v)", ok, dst)
	}
	reply := naFrame(t, owner, ownerLL, na, 255)
	if got := NDPAnswer(reply, prober, ip); got.String() != owner.String() {
		t.Errorf("NDPAnswer = %v, want %v", got, owner)
	}
	if got := NDPAnswer(reply, prober, netip.MustParseAddr("2001:db8::201")); got != nil {
		t.Errorf("answer for another address read as %v", got)
	}
	if got := NDPAnswer(reply, owner, ip); got != nil {
		t.Errorf("our own frame read as an answer: %v", got)
	}
	if got := NDPAnswer(naFrame(t, owner, ownerLL, na, 254), prober, ip); got != nil {
		t.Errorf("an answer with hop limit 254 (routed, not from the link) read as %v", got)
	}
	if got := NDPAnswer(probe, owner, ip); got != nil {
		t.Errorf("the probe read as an answer: %v", got)
	}
	for _, b := range [][]byte{nil, {1, 2, 3}, reply[:50], reply[:len(reply)-4]} {
		if got := NDPAnswer(b, prober, ip); got != nil {
			t.Errorf("garbage %x read as %v", b, got)
		}
	}
	if NDPProbe(prober, netip.MustParseAddr("198.51.100.1")) != nil {
		t.Error("an IPv4 address got a DAD probe")
	}
}

// FuzzNDPAnswer: NDPAnswer returns the advertised MAC of exactly those frames that are another
// station's answer to a DAD probe for the probed address (a neighbour advertisement to all
// nodes, Solicited clear) carried straight in IPv6 with hop limit 255, and nil for every other
// frame.
func FuzzNDPAnswer(f *testing.F) {
	prober, _ := net.ParseMAC("02:00:00:00:00:01")
	owner, _ := net.ParseMAC("02:00:00:00:00:02")
	ip := netip.MustParseAddr("2001:db8::200")
	ll := netip.MustParseAddr("fe80::2")
	f.Add(naFrame(f, owner, ll, advertisement(ip, owner, false), 255))
	f.Add(naFrame(f, owner, ll, &ndp.NeighborAdvertisement{TargetAddress: ip}, 255)) // no target link-layer option
	f.Add(naFrame(f, owner, ll, advertisement(netip.MustParseAddr("2001:db8::201"), owner, false), 255))
	f.Add(naFrame(f, owner, ll, advertisement(ip, owner, false), 64))
	f.Add(naFrame(f, prober, ll, advertisement(ip, prober, false), 255))
	// An answer to someone else's solicitation, and one sent to one node rather than all.
	f.Add(naFrame(f, owner, ll, advertisement(ip, owner, true), 255))
	f.Add(naFrameTo(f, owner, ll, netip.MustParseAddr("fe80::1"), advertisement(ip, owner, false), 255))
	f.Add(NDPProbe(prober, ip))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		var want net.HardwareAddr
		var eth ethernet.Frame
		if eth.UnmarshalBinary(frame) == nil && eth.EtherType == etherTypeIPv6 && !bytes.Equal(eth.Source, prober) {
			if h, err := ipv6.ParseHeader(eth.Payload); err == nil && h.Version == 6 && h.NextHeader == protoICMPv6 && h.HopLimit == 255 &&
				h.Dst.Equal(net.IPv6linklocalallnodes) && h.PayloadLen <= len(eth.Payload)-ipv6HeaderLen {
				m, err := ndp.ParseMessage(eth.Payload[ipv6HeaderLen : ipv6HeaderLen+h.PayloadLen])
				if na, ok := m.(*ndp.NeighborAdvertisement); err == nil && ok && na.TargetAddress == ip && !na.Solicited {
					want = eth.Source
					for _, o := range na.Options {
						if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target {
							want = lla.Addr
							break
						}
					}
					if len(want) != 6 {
						want = nil
					}
				}
			}
		}
		if got := NDPAnswer(frame, prober, ip); got.String() != want.String() {
			t.Fatalf("NDPAnswer(%x) = %q, want %q", frame, got, want)
		}
	})
}

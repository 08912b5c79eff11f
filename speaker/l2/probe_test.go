package l2

import (
	"net"
	"net/netip"
	"testing"

	"github.com/mdlayher/arp"
)

// TestProbeRoundTrip: the probe is a request the responder answers, and the answer is read
// back as the owner's MAC; a reply for another address, our own frame and garbage are not.
func TestProbeRoundTrip(t *testing.T) {
	prober, _ := net.ParseMAC("02:00:00:00:00:01")
	owner, _ := net.ParseMAC("02:00:00:00:00:02")
	ip := netip.MustParseAddr("198.51.100.200")
	probe := ARPProbe(prober, ip)
	reply := arpReply(probe, owner, func(a netip.Addr) bool { return a == ip })
	if reply == nil {
		t.Fatal("the responder does not answer the probe")
	}
	if got := ARPAnswer(reply, prober, ip); got.String() != owner.String() {
		t.Errorf("ARPAnswer = %v, want %v", got, owner)
	}
	if got := ARPAnswer(reply, prober, netip.MustParseAddr("198.51.100.201")); got != nil {
		t.Errorf("answer for another address read as %v", got)
	}
	if got := ARPAnswer(reply, owner, ip); got != nil {
		t.Errorf("our own frame read as an answer: %v", got)
	}
	if got := ARPAnswer(probe, owner, ip); got != nil {
		t.Errorf("the request read as an answer: %v", got)
	}
	for _, b := range [][]byte{nil, {1, 2, 3}, probe[:20]} {
		if got := ARPAnswer(b, prober, ip); got != nil {
			t.Errorf("garbage %x read as %v", b, got)
		}
	}
	var p arp.Packet
	if err := p.UnmarshalBinary(probe[14:]); err != nil || p.SenderIP != netip.IPv4Unspecified() {
		t.Errorf("probe sender %v (%v), want 0.0.0.0 so no cache learns from it", p.SenderIP, err)
	}
}

func FuzzARPAnswer(f *testing.F) {
	prober, _ := net.ParseMAC("02:00:00:00:00:01")
	owner, _ := net.ParseMAC("02:00:00:00:00:02")
	ip := netip.MustParseAddr("198.51.100.200")
	f.Add(arpReply(ARPProbe(prober, ip), owner, func(netip.Addr) bool { return true }))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if mac := ARPAnswer(b, prober, ip); mac != nil && len(mac) != 6 {
			t.Fatalf("answer with a %d-byte MAC", len(mac))
		}
	})
}

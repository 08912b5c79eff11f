package l2

import (
	"bytes"
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

// FuzzARPAnswer: ARPAnswer returns the sender MAC of exactly those frames that are another
// station's ARP reply for the probed address addressed to our probe (target our MAC and
// 0.0.0.0), and nil for every other frame, so no stray, gratuitous, mistaken or echoed frame
// reads as the owner's answer.
func FuzzARPAnswer(f *testing.F) {
	prober, _ := net.ParseMAC("02:00:00:00:00:01")
	owner, _ := net.ParseMAC("02:00:00:00:00:02")
	ip := netip.MustParseAddr("198.51.100.200")
	all := func(netip.Addr) bool { return true }
	f.Add(arpReply(ARPProbe(prober, ip), owner, all))
	f.Add(arpReply(ARPProbe(prober, netip.MustParseAddr("198.51.100.201")), owner, all))
	f.Add(arpReply(ARPProbe(owner, ip), prober, all)) // our own reply, seen on the way out
	f.Add(ARPProbe(prober, ip))
	for _, g := range gratuitousARP(owner, ip) { // an announcement, not an answer
		f.Add(g)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		var want net.HardwareAddr
		if eth, p, ok := readARP(frame); ok && !bytes.Equal(eth.Source, prober) && p.Operation == arp.OperationReply &&
			p.SenderIP == ip && len(p.SenderHardwareAddr) == 6 && bytes.Equal(p.TargetHardwareAddr, prober) && p.TargetIP == netip.IPv4Unspecified() {
			want = p.SenderHardwareAddr
		}
		if got := ARPAnswer(frame, prober, ip); got.String() != want.String() {
			t.Fatalf("ARPAnswer(%x) = %q, want %q", frame, got, want)
		}
	})
}

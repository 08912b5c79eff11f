package netlab

import (
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
)

var arpingFrom = regexp.MustCompile(`bytes from ([0-9a-f:]{17})`)

// ARPing asks for ip count times from namespace ns (its eth0, with iputils' arping, which
// speaks IPv4 only) and returns the sorted MACs that answered; none when nobody did.
func ARPing(ns string, ip netip.Addr, count int) []string { return ARPingOn(ns, "eth0", ip, count) }

// ARPingOn is ARPing from ns's interface ifname.
func ARPingOn(ns, ifname string, ip netip.Addr, count int) []string {
	out, _ := exec.Command("ip", "netns", "exec", ns, "arping", "-c", fmt.Sprint(count), "-w", "3", "-i", ifname, ip.String()).CombinedOutput()
	var macs []string
	for _, m := range arpingFrom.FindAllStringSubmatch(string(out), -1) {
		if !slices.Contains(macs, m[1]) {
			macs = append(macs, m[1])
		}
	}
	slices.Sort(macs)
	return macs
}

// An ARPAsker asks who answers ARP from a raw socket on a host's eth0: the host's kernel sends
// nothing, so the asking never touches its neighbour table.
type ARPAsker struct {
	conn *packet.Conn
	mac  net.HardwareAddr
	src  netip.Addr
}

// NewARPAsker opens an ARPAsker on h's eth0.
func NewARPAsker(h Host) (*ARPAsker, error) {
	a := &ARPAsker{mac: h.MAC, src: h.IPv4.Addr()}
	err := In(h.NS, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		a.conn, err = packet.Listen(ifi, packet.Raw, int(ethernet.EtherTypeARP), nil)
		return err
	})
	return a, err
}

func (a *ARPAsker) Close() error { return a.conn.Close() }

// Ask broadcasts one request for each of ips.
func (a *ARPAsker) Ask(ips ...netip.Addr) {
	for _, ip := range ips {
		req, _ := arp.NewPacket(arp.OperationRequest, a.mac, a.src, ethernet.Broadcast, ip)
		pb, _ := req.MarshalBinary()
		fb, _ := (&ethernet.Frame{Destination: ethernet.Broadcast, Source: a.mac, EtherType: ethernet.EtherTypeARP, Payload: pb}).MarshalBinary()
		_, _ = a.conn.WriteTo(fb, &packet.Addr{HardwareAddr: ethernet.Broadcast})
	}
}

// Answers reads until deadline, or until each returns false, and calls each with every
// answer addressed to this asker (answers to another sender on the segment, an ARP flood say,
// are not) and every gratuitous ARP: the address it is for and the MAC that sent it.
func (a *ARPAsker) Answers(deadline time.Time, each func(ip netip.Addr, mac string, gratuitous bool) (more bool)) {
	_ = a.conn.SetReadDeadline(deadline)
	buf := make([]byte, 1514)
	for time.Now().Before(deadline) {
		n, _, err := a.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		var f ethernet.Frame
		var p arp.Packet
		if f.UnmarshalBinary(buf[:n]) != nil || p.UnmarshalBinary(f.Payload) != nil {
			continue
		}
		answer := p.Operation == arp.OperationReply && p.TargetIP == a.src
		gratuitous := p.SenderIP == p.TargetIP
		if (answer || gratuitous) && !each(p.SenderIP, p.SenderHardwareAddr.String(), gratuitous) {
			return
		}
	}
}

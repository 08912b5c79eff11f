package handoff

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestClosedEarlier: of a listed flow's ports, only a closed TCP entry (TIME_WAIT, CLOSE) is an
// earlier connection's to delete; an open one may be this node's own, and other ports are not
// listed.
func TestClosedEarlier(t *testing.T) {
	listed := map[Flow]bool{{Client: netip.MustParseAddrPort("198.51.100.3:20000"), Service: netip.MustParseAddrPort("203.0.113.10:80")}: true}
	entry := func(sport uint16, state uint8) *netlink.ConntrackFlow {
		e := &netlink.ConntrackFlow{ProtoInfo: &netlink.ProtoInfoTCP{State: state}}
		e.Forward.Protocol = unix.IPPROTO_TCP
		e.Forward.SrcIP, e.Forward.DstIP = net.ParseIP("198.51.100.3"), net.ParseIP("203.0.113.10")
		e.Forward.SrcPort, e.Forward.DstPort = sport, 80
		return e
	}
	for _, c := range []struct {
		sport uint16
		state uint8
		want  bool
	}{
		{20000, tcpTimeWait, true},
		{20000, tcpClose, true},
		{20000, 3, false}, // ESTABLISHED
		{20000, tcpLastAck, false},
		{20000, tcpSynSent, false},
		{20001, tcpTimeWait, false},
	} {
		if got := closedEarlier(entry(c.sport, c.state), listed); got != c.want {
			t.Errorf("port %d in state %d: closedEarlier = %v, want %v", c.sport, c.state, got, c.want)
		}
	}
	udp := entry(20000, tcpTimeWait)
	udp.Forward.Protocol, udp.ProtoInfo = unix.IPPROTO_UDP, nil
	if closedEarlier(udp, listed) {
		t.Error("a UDP entry counts as a closed TCP connection")
	}
}

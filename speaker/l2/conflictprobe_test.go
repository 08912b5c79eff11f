package l2

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
)

// TestProbeFreeInNamespaces: a foreign host on the LAN holding an IPv4 and an IPv6 address
// answers the ARP probe and the DAD solicitation with its MAC (its kernel, not Portico, does
// the answering), the addresses nobody holds get no answer, and the prober's own MAC is never
// among the answers.
func TestProbeFreeInNamespaces(t *testing.T) {
	netlab.Require(t)
	lab := netlab.New(t)
	foreign := lab.AddHost("router", "52:54:00:00:00:99", "198.51.100.200/24", "2001:db8:1::200/64")
	node := lab.AddHost("a", "02:00:00:00:00:0a", "198.51.100.11/24", "2001:db8:1::11/64")
	held4, held6 := netip.MustParseAddr("198.51.100.200"), netip.MustParseAddr("2001:db8:1::200")
	free4, free6 := netip.MustParseAddr("198.51.100.201"), netip.MustParseAddr("2001:db8:1::201")
	var heard map[netip.Addr][]string
	if err := netlab.In(node.NS, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		heard, err = ProbeFree(ifi, []netip.Addr{held4, free4, held6, free6}, 3, 200*time.Millisecond)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for ip, want := range map[netip.Addr]string{held4: foreign.MAC.String(), held6: foreign.MAC.String(), free4: "", free6: ""} {
		got := ""
		if len(heard[ip]) > 0 {
			got = heard[ip][0]
		}
		if got != want || len(heard[ip]) > 1 {
			t.Errorf("%s: heard %v, want %q", ip, heard[ip], want)
		}
	}
}

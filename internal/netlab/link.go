package netlab

import (
	"net/netip"
	"os/exec"
	"strings"
)

// PointToPoint links two namespaces directly with a veth pair, IPv6 link-local addresses only:
// aIf in aNS with aLL, bIf in bNS with bLL (no address derived from the MAC, so the test knows
// both ends). It is an unnumbered link such as a node's uplink to its leaf. The pair goes away
// with either namespace.
func PointToPoint(t T, aNS, aIf string, aLL netip.Addr, bNS, bIf string, bLL netip.Addr) {
	t.Helper()
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("-n", aNS, "link", "add", aIf, "type", "veth", "peer", "name", bIf, "netns", bNS)
	for _, end := range []struct {
		ns, ifname string
		ll         netip.Addr
	}{{aNS, aIf, aLL}, {bNS, bIf, bLL}} {
		run("-n", end.ns, "link", "set", end.ifname, "addrgenmode", "none")
		run("-n", end.ns, "addr", "add", end.ll.String()+"/64", "dev", end.ifname, "nodad")
		run("-n", end.ns, "link", "set", end.ifname, "up")
	}
}

package netlab

import (
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
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

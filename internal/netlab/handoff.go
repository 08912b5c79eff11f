package netlab

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// HandoffState is what of Portico's hand-off a node's network namespace ns holds, a line each:
// its nftables table (inet portico-handoff; inet portico, the forwarding guard's, too when
// guard), a policy-routing rule or a route of its routing tables (3580 to 3835), the
// connection-tracking entries whose mark has its bit (0x2000). Empty: nothing.
func HandoffState(ns string, guard bool) string {
	left := HandoffRouting(ns)
	tables, _ := exec.Command("ip", "netns", "exec", ns, "nft", "list", "tables").CombinedOutput()
	for _, line := range strings.Split(string(tables), "\n") {
		if line == "table inet portico-handoff" || guard && line == "table inet portico" {
			left = append(left, "nft: "+line)
		}
	}
	if n := MarkedEntries(ns, 0x2000); n != 0 {
		left = append(left, fmt.Sprintf("conntrack: %d entries with the mark 0x2000", n))
	}
	return strings.Join(left, "\n")
}

// HandoffRouting is the hand-off's policy-routing rules and the routes of its routing tables in
// ns, a line each.
func HandoffRouting(ns string) []string {
	var left []string
	for _, family := range []string{"-4", "-6"} {
		rules, _ := exec.Command("ip", "-n", ns, family, "rule").CombinedOutput()
		routes, _ := exec.Command("ip", "-n", ns, family, "route", "show", "table", "all").CombinedOutput()
		for _, line := range strings.Split(string(rules)+string(routes), "\n") {
			if handoffTable(line) {
				left = append(left, "ip "+family+": "+line)
			}
		}
	}
	return left
}

// MarkedEntries counts ns's connection-tracking entries whose mark has bit and that match
// conntrack's filter options, if any (such as "-d", an address) (-1: conntrack failed).
func MarkedEntries(ns string, bit uint32, filter ...string) int {
	args := append([]string{"netns", "exec", ns, "conntrack", "-L", "--mark", fmt.Sprintf("%#x/%#x", bit, bit)}, filter...)
	out, err := exec.Command("ip", args...).Output()
	if err != nil {
		return -1
	}
	return strings.Count(string(out), "\n")
}

// handoffTable reports whether a line of `ip rule` or `ip route show table all` names one of
// the hand-off's routing tables (3580 to 3835).
func handoffTable(line string) bool {
	f := strings.Fields(line)
	for i := range f[:max(len(f)-1, 0)] {
		if f[i] == "lookup" || f[i] == "table" {
			if n, err := strconv.Atoi(f[i+1]); err == nil && n >= 3580 && n <= 3835 {
				return true
			}
		}
	}
	return false
}

package l2

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// Link is what the choice of interfaces reads of one network interface. Links are read from
// the kernel at the edge (ReadLinks); everything here is a function of these attributes.
type Link struct {
	Name string
	// Kind is the kernel's link kind as netlink names it: "device", "veth", "bridge", "bond",
	// "vxlan", "tuntap", ...
	Kind                           string
	Up, Broadcast, Loopback, NoARP bool
	// NoCarrier: the link is up but its carrier is lost (a cable pulled, a switch port down):
	// it may still answer, but nobody hears it (Subnets).
	NoCarrier bool
	// MAC is the link's hardware address; one of 6 bytes makes it Ethernet.
	MAC net.HardwareAddr
	// Master is the bond or bridge this link is a port of; "" when none.
	Master   string
	Prefixes []netip.Prefix
}

// Verdict says whether a link answers when an advertisement names no interface, and if not,
// why.
type Verdict struct {
	Name    string
	Answers bool
	Reason  string // why it does not answer; "" when it does
}

// podNamePrefixes are the names container runtimes, CNIs and kube-proxy give their interfaces:
// a pod's veth, a CNI bridge or a dummy holding Service addresses never faces the LAN.
var podNamePrefixes = []string{"veth", "cni", "docker", "cali", "flannel", "cilium", "lxc", "kube-ipvs"}

// virtualKinds are link kinds that are not a LAN segment's port: tunnels (whatever their name)
// and devices that carry no neighbour discovery of their own.
var virtualKinds = []string{"vxlan", "geneve", "gre", "gretap", "ip6gre", "ip6gretap", "erspan", "ip6erspan",
	"ipip", "ip6tnl", "sit", "vti", "vti6", "wireguard", "tuntap", "dummy", "ifb", "nlmon", "vrf"}

// unusable says why l cannot answer ARP or NDP at all (named or not), or "" when it can.
func unusable(l Link) string {
	switch {
	case l.Loopback:
		return "loopback"
	case !l.Up:
		return "down"
	case !l.Broadcast || len(l.MAC) != 6:
		return "not an Ethernet broadcast link"
	case l.NoARP:
		return "NOARP link"
	case l.Master != "":
		return "port of " + l.Master + ", which answers for it"
	}
	return ""
}

// MACs are the hardware addresses of every usable link: what this node may answer with on
// any interface an advertisement names, so that its answers are told from a foreign host's.
func MACs(links []Link) []string {
	var out []string
	for _, l := range links {
		if unusable(l) == "" {
			out = append(out, l.MAC.String())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Decide says, for every link, whether it answers for addresses whose advertisements name no
// interface: a usable link that is neither a pod's or CNI's interface (by name) nor a tunnel or
// virtual device (by kind).
func Decide(links []Link) []Verdict {
	out := make([]Verdict, 0, len(links))
	for _, l := range links {
		v := Verdict{Name: l.Name, Reason: unusable(l)}
		if v.Reason == "" {
			if i := slices.IndexFunc(podNamePrefixes, func(p string) bool { return strings.HasPrefix(l.Name, p) }); i >= 0 {
				v.Reason = "named " + podNamePrefixes[i] + "*: a pod's, CNI's or kube-proxy's interface"
			} else if slices.Contains(virtualKinds, l.Kind) {
				v.Reason = "a " + l.Kind + " device, not a LAN port"
			}
		}
		v.Answers = v.Reason == ""
		out = append(out, v)
	}
	return out
}

// ForAddress picks, among the links that answer by default, those that answer for ip: the ones
// whose subnet contains ip when any does (the LAN the address belongs to), else all of them.
func ForAddress(ip netip.Addr, links []Link, verdicts []Verdict) []string {
	var all, onSubnet []string
	for i, l := range links {
		if !verdicts[i].Answers {
			continue
		}
		all = append(all, l.Name)
		if slices.ContainsFunc(l.Prefixes, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			onSubnet = append(onSubnet, l.Name)
		}
	}
	if len(onSubnet) > 0 {
		return onSubnet
	}
	return all
}

// IsPattern reports whether an advertisement's interface entry is a pattern ("eth*",
// "enp?s0") rather than a name.
func IsPattern(name string) bool { return strings.ContainsAny(name, "*?") }

// Expand resolves an advertisement's interfaces against the links: a name stays as it is (one
// that does not exist is reported when it is opened), a pattern becomes the usable links it
// matches, sorted. A pattern matching none is a problem.
func Expand(entries []string, links []Link) (names []string, problems []error) {
	for _, e := range entries {
		if !IsPattern(e) {
			names = append(names, e)
			continue
		}
		n := len(names)
		for _, l := range links {
			if Match(e, l.Name) && unusable(l) == "" {
				names = append(names, l.Name)
			}
		}
		if len(names) == n {
			problems = append(problems, fmt.Errorf("interface pattern %s matches no usable interface", e))
		}
	}
	slices.Sort(names)
	return slices.Compact(names), problems
}

// Match reports whether name matches pattern, where "*" stands for any run of characters and
// "?" for one; every other character stands for itself (interface names may hold "[" or "\",
// which path.Match would take for syntax).
func Match(pattern, name string) bool {
	if pattern == "" {
		return name == ""
	}
	switch pattern[0] {
	case '*':
		for i := 0; i <= len(name); i++ {
			if Match(pattern[1:], name[i:]) {
				return true
			}
		}
		return false
	case '?':
		return name != "" && Match(pattern[1:], name[1:])
	default:
		return name != "" && name[0] == pattern[0] && Match(pattern[1:], name[1:])
	}
}

package rules

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// Subnets are, by node, the subnets of the up interfaces its speaker answers on by default, as
// it reports them (SpeakerStatus.Subnets). A node that answers for an address over L2 from an
// interface outside the address's subnet answers where nobody asks: its neighbours on that
// LAN never hear it. A node missing from Subnets has not said (its speaker has not reported
// yet, or has no such interface) and is taken to answer anywhere, as before speakers reported.
type Subnets map[string][]netip.Prefix

// Reaches reports whether node has an up interface whose subnet holds ip (true when unknown).
func (s Subnets) Reaches(node string, ip netip.Addr) bool {
	ps, known := s[node]
	ip = ip.Unmap()
	return !known || slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(ip) })
}

// ParseSubnets reads the subnets one speaker reports; an entry that is not a prefix is skipped
// (the CRD validates them, this only keeps a bad one from counting).
func ParseSubnets(entries []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(entries))
	for _, e := range entries {
		if p, err := netip.ParsePrefix(e); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// reaching keeps the nodes that reach ip; when none does, all of them, and offSubnet says so:
// better a node answering where it may be heard than none at all.
func (s Subnets) reaching(ip netip.Addr, nodes []string) (kept []string, offSubnet bool) {
	on := slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return !s.Reaches(n, ip) })
	if len(on) == 0 && len(nodes) > 0 {
		return nodes, true
	}
	return on, false
}

// SubnetsOf reads the subnets the speakers report in their Speaker status; a speaker that
// reports none (absent, not empty) is left out: it may answer anywhere.
func SubnetsOf(speakers []v1alpha1.Speaker) Subnets {
	out := Subnets{}
	for i := range speakers {
		if s := speakers[i].Status.Subnets; s != nil {
			out[speakers[i].Name] = ParseSubnets(s)
		}
	}
	return out
}

// OffSubnetNote says that ip's owner was elected as if subnets did not matter (L2Owner's
// offSubnet), for the Service's Announced condition and kubectl portico explain.
func OffSubnetNote(ip netip.Addr) string {
	return fmt.Sprintf("no eligible node reports an up interface in a subnet holding %s, so it is answered from one that may not be heard there", ip)
}

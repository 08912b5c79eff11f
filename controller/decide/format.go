package decide

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/portico-lb/portico/controller/allocator"
)

// andAddrs names addresses in a sentence: "10.0.0.200" or "10.0.0.200 and 2001:db8::1".
func andAddrs(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, " and ")
}

// fromPools says where each address came from: "10.0.0.200 from pool home-lab", "10.0.0.200
// and 2001:db8::1 from pool dual", or, a family from each of two pools, "10.0.0.200 from pool
// v4pool and 2001:db8::1 from pool v6pool".
func fromPools(asg allocator.Assignment) string {
	if !strings.Contains(asg.Pool(), ",") {
		return fmt.Sprintf("%s from pool %s", andAddrs(asg.IPs), asg.Pool())
	}
	each := make([]string, len(asg.IPs))
	for i, ip := range asg.IPs {
		each[i] = fmt.Sprintf("%s from pool %s", ip, asg.Pools[i])
	}
	return strings.Join(each, " and ")
}

// splitOrphans parts an assignment into its addresses in no pool and those in one.
func splitOrphans(asg allocator.Assignment) (orphans, pooled allocator.Assignment) {
	for i, ip := range asg.IPs {
		part := &pooled
		if asg.Pools[i] == "" {
			part = &orphans
		}
		part.IPs, part.Pools = append(part.IPs, ip), append(part.Pools, asg.Pools[i])
	}
	return orphans, pooled
}

package decide

import (
	"net/netip"
	"strings"
)

// andAddrs names addresses in a sentence: "10.0.0.200" or "10.0.0.200 and 2001:db8::1".
func andAddrs(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, " and ")
}

package bgp

import (
	"fmt"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// ParseCommunity reads a community as the API defines it (v1alpha1.Community.Parse). Exactly
// one of the results is meaningful: large is true for a large community.
func ParseCommunity(s string) (std uint32, lc LargeCommunity, large bool, err error) {
	std, l, large, err := v1alpha1.Community(s).Parse()
	return std, LargeCommunity{l[0], l[1], l[2]}, large, err
}

func communityString(c uint32) string {
	for name, v := range v1alpha1.WellKnownCommunities {
		if v == c {
			return name
		}
	}
	return fmt.Sprintf("%d:%d", c>>16, c&0xFFFF)
}

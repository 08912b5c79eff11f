package plan

import (
	"fmt"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// addCommunity appends a community, as the API defines it (v1alpha1.Community.Parse), to the
// standard or the large ones.
func (a *Attrs) addCommunity(c v1alpha1.Community) error {
	v, err := c.Parse()
	switch {
	case err != nil:
		return err
	case v.IsLarge:
		a.Large = append(a.Large, LargeCommunity(v.Large))
	default:
		a.Communities = append(a.Communities, v.Standard)
	}
	return nil
}

// CommunityStrings are the route's communities as the API writes them: standard (well-known
// ones by name) then large.
func (a Attrs) CommunityStrings() []string {
	out := make([]string, 0, len(a.Communities)+len(a.Large))
	for _, c := range a.Communities {
		out = append(out, communityString(c))
	}
	for _, c := range a.Large {
		out = append(out, c.String())
	}
	return out
}

func communityString(c uint32) string {
	for name, v := range v1alpha1.WellKnownCommunities {
		if v == c {
			return name
		}
	}
	return fmt.Sprintf("%d:%d", c>>16, c&0xFFFF)
}

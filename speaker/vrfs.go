package speaker

import (
	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/l2"
)

// vrfs reads the names of this node's VRF devices when a BGPPeer names one (nil otherwise, or
// when the links cannot be read: the plan then does not check), and notes whether one named is
// missing, so the periodic refresh re-plans until it appears.
func (s *Speaker) vrfs(peers []v1alpha1.BGPPeer) map[string]bool {
	var named []string
	for i := range peers {
		if v := peers[i].Spec.VRF; v != "" {
			named = append(named, v)
		}
	}
	if len(named) == 0 {
		s.vrfAbsent.Store(false)
		return nil
	}
	links, err := l2.ReadLinks()
	if err != nil {
		s.Log.Error(err, "reading the node's VRF devices")
		return nil
	}
	have := map[string]bool{}
	for _, l := range links {
		if l.Kind == "vrf" {
			have[l.Name] = true
		}
	}
	absent := false
	for _, v := range named {
		absent = absent || !have[v]
	}
	s.vrfAbsent.Store(absent)
	return have
}

package plan

import "fmt"

// checkVRF reports a vrf the node has no VRF device for: the session could only fail to
// connect, so it is not opened and the node says why instead.
func (w *World) checkVRF(vrf string) error {
	if vrf == "" || w.VRFs == nil || w.VRFs[vrf] {
		return nil
	}
	return fmt.Errorf("vrf %s: this node has no VRF device of that name (ip link add %s type vrf table N), so no session", vrf, vrf)
}

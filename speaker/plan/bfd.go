package plan

import (
	"fmt"
	"time"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules/bfdprofile"
)

// peerBFD is the BFD session a BGPPeer asks for through its bfdProfile, defaults applied; the
// zero Config when it asks for none. A profile that cannot be used is an error, and the BGP
// session then runs without BFD rather than not at all.
func peerBFD(bp *v1alpha1.BGPPeer, profiles []v1alpha1.BFDProfile) (bfdprofile.Config, error) {
	name := bp.Spec.BFDProfile
	if name == "" {
		return bfdprofile.Config{}, nil
	}
	if bp.Spec.Interface != "" {
		return bfdprofile.Config{}, fmt.Errorf("bfdProfile %s: BFD with an unnumbered (interface) peer is not supported", name)
	}
	for i := range profiles {
		if profiles[i].Name != string(name) {
			continue
		}
		s := &profiles[i].Spec
		cfg := bfdprofile.Config{
			DesiredMinTx:  milliseconds(s.TransmitInterval, v1alpha1.DefaultBFDInterval),
			RequiredMinRx: milliseconds(s.ReceiveInterval, v1alpha1.DefaultBFDInterval),
			DetectMult:    uint8(orDefault(s.DetectMultiplier, v1alpha1.DefaultBFDMultiplier)),
			Passive:       s.PassiveMode,
		}
		if bp.Spec.EBGPMultiHop { // the router may be routers away: RFC 5883
			cfg.Hops = bfdprofile.Hops{Multihop: true, MinTTL: uint8(orDefault(s.MinimumTTL, v1alpha1.DefaultBFDMinimumTTL))}
		}
		return cfg, nil
	}
	return bfdprofile.Config{}, fmt.Errorf("bfdProfile %s not found", name)
}

func orDefault(v *uint32, def uint32) uint32 {
	if v == nil {
		return def
	}
	return *v
}

func milliseconds(v *uint32, def uint32) time.Duration {
	return time.Duration(orDefault(v, def)) * time.Millisecond
}

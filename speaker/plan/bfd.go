package plan

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules/bfdprofile"
)

// peerBFD is the BFD session a BGPPeer asks for through its bfdProfile, defaults applied; the
// zero Config when it asks for none. A profile that cannot be used (its key unreadable among
// them) is an error, and the BGP session then runs without BFD rather than not at all: without
// its key a BFD session could never come Up with a router that requires it.
func peerBFD(bp *v1alpha1.BGPPeer, profiles []v1alpha1.BFDProfile, secrets []corev1.Secret) (bfdprofile.Config, error) {
	name := bp.Spec.BFDProfile
	if name == "" {
		return bfdprofile.Config{}, nil
	}
	if bp.Spec.Interface != "" {
		return bfdprofile.Config{}, bfdUnusable(v1alpha1.ReasonBFDNotSupported, fmt.Errorf("bfdProfile %s: BFD with an unnumbered (interface) peer is not supported", name))
	}
	if bp.Spec.VRF != "" {
		return bfdprofile.Config{}, bfdUnusable(v1alpha1.ReasonBFDNotSupported, fmt.Errorf("bfdProfile %s: BFD with a vrf peer is not supported", name))
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
		if a := s.Authentication; a != nil {
			auth, err := bfdAuth(a, secrets)
			if err != nil {
				return bfdprofile.Config{}, bfdUnusable(v1alpha1.ReasonBFDKeyUnusable, fmt.Errorf("bfdProfile %s: %w", name, err))
			}
			cfg.Auth = auth
		}
		return cfg, nil
	}
	return bfdprofile.Config{}, bfdUnusable(v1alpha1.ReasonBFDProfileNotFound, fmt.Errorf("bfdProfile %s not found", name))
}

// BFDProblem is why a node runs a BGPPeer's session without the BFD its bfdProfile asks for:
// the reason (v1alpha1.ReasonBFD*) and the problem, for the Speaker status.
type BFDProblem struct{ Reason, Message string }

// bfdError is a bfdProfile that cannot be applied, with its reason.
type bfdError struct {
	reason string
	err    error
}

func (e *bfdError) Error() string { return e.err.Error() }
func (e *bfdError) Unwrap() error { return e.err }

func bfdUnusable(reason string, err error) error { return &bfdError{reason: reason, err: err} }

// bfdProblemOf is err's BFDProblem.
func bfdProblemOf(err error) BFDProblem {
	p := BFDProblem{Message: err.Error()}
	if be, ok := errors.AsType[*bfdError](err); ok {
		p.Reason = be.reason
	}
	return p
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

// bfdAuth is a profile's authentication with its key read from the Secret.
func bfdAuth(a *v1alpha1.BFDAuthentication, secrets []corev1.Secret) (bfdprofile.Auth, error) {
	types := map[v1alpha1.BFDAuthenticationType]bfdprofile.AuthType{
		v1alpha1.BFDKeyedSHA1: bfdprofile.AuthKeyedSHA1, v1alpha1.BFDMeticulousKeyedSHA1: bfdprofile.AuthMeticulousKeyedSHA1}
	t, ok := types[a.Type]
	if !ok {
		return bfdprofile.Auth{}, fmt.Errorf("authentication type %q is not KeyedSHA1 or MeticulousKeyedSHA1", a.Type)
	}
	key, err := secretKey("authentication.secretRef", &a.SecretRef, secrets)
	if err != nil {
		return bfdprofile.Auth{}, err
	}
	if len(key) > bfdprofile.MaxKeyLen {
		return bfdprofile.Auth{}, fmt.Errorf("authentication.secretRef %s/%s: key %q is longer than the %d bytes Keyed SHA1 allows",
			a.SecretRef.Namespace, a.SecretRef.Name, refKey(&a.SecretRef), bfdprofile.MaxKeyLen)
	}
	return bfdprofile.Auth{Type: t, KeyID: uint8(orDefault(a.KeyID, 0)), Key: bfdprofile.Key(key)}, nil
}

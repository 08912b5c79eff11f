package v1alpha1

import (
	"fmt"
	"strconv"
	"strings"
)

// WellKnownCommunities are the community names a Community may be (RFC 1997, RFC 3765,
// RFC 7999), with their values.
var WellKnownCommunities = map[string]uint32{
	"no-export":           0xFFFFFF01,
	"no-advertise":        0xFFFFFF02,
	"no-export-subconfed": 0xFFFFFF03,
	"no-peer":             0xFFFFFF04,
	"blackhole":           0xFFFF029A,
}

// CommunityValue is a parsed Community: a standard (RFC 1997) one, or a large (RFC 8092) one
// when IsLarge. It is no API field.
// +kubebuilder:object:generate=false
type CommunityValue struct {
	Standard uint32
	Large    LargeCommunityValue
	IsLarge  bool
}

// LargeCommunityValue is a large community's three numbers.
// +kubebuilder:object:generate=false
type LargeCommunityValue struct{ Global, Local1, Local2 uint32 }

// Parse reads "65000:100", a well-known name, or "large:64512:1:2" — what the CRD's rules
// accept.
func (c Community) Parse() (CommunityValue, error) {
	s := string(c)
	if v, ok := WellKnownCommunities[s]; ok {
		return CommunityValue{Standard: v}, nil
	}
	if rest, ok := strings.CutPrefix(s, "large:"); ok {
		f := strings.Split(rest, ":")
		if len(f) != 3 {
			return CommunityValue{}, fmt.Errorf("community %q: want large:GLOBAL:LOCAL1:LOCAL2", s)
		}
		var n [3]uint32
		for i, x := range f {
			v, err := strconv.ParseUint(x, 10, 32)
			if err != nil {
				return CommunityValue{}, fmt.Errorf("community %q: %q is not a number up to 4294967295", s, x)
			}
			n[i] = uint32(v)
		}
		return CommunityValue{Large: LargeCommunityValue{n[0], n[1], n[2]}, IsLarge: true}, nil
	}
	hi, lo, ok := strings.Cut(s, ":")
	a, errA := strconv.ParseUint(hi, 10, 16)
	b, errB := strconv.ParseUint(lo, 10, 16)
	if !ok || errA != nil || errB != nil {
		return CommunityValue{}, fmt.Errorf("community %q: want AS:VALUE (each up to 65535), large:G:L1:L2 or a well-known name", s)
	}
	return CommunityValue{Standard: uint32(a)<<16 | uint32(b)}, nil
}

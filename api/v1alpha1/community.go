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

// Parse reads "65000:100", a well-known name, or "large:64512:1:2" — what the CRD's rules
// accept. Exactly one of the results is meaningful: isLarge says which.
func (c Community) Parse() (std uint32, large [3]uint32, isLarge bool, err error) {
	s := string(c)
	if v, ok := WellKnownCommunities[s]; ok {
		return v, large, false, nil
	}
	if rest, ok := strings.CutPrefix(s, "large:"); ok {
		f := strings.Split(rest, ":")
		if len(f) != 3 {
			return 0, large, true, fmt.Errorf("community %q: want large:GLOBAL:LOCAL1:LOCAL2", s)
		}
		for i, x := range f {
			v, err := strconv.ParseUint(x, 10, 32)
			if err != nil {
				return 0, [3]uint32{}, true, fmt.Errorf("community %q: %q is not a number up to 4294967295", s, x)
			}
			large[i] = uint32(v)
		}
		return 0, large, true, nil
	}
	hi, lo, ok := strings.Cut(s, ":")
	a, errA := strconv.ParseUint(hi, 10, 16)
	b, errB := strconv.ParseUint(lo, 10, 16)
	if !ok || errA != nil || errB != nil {
		return 0, large, false, fmt.Errorf("community %q: want AS:VALUE (each up to 65535), large:G:L1:L2 or a well-known name", s)
	}
	return uint32(a)<<16 | uint32(b), large, false, nil
}

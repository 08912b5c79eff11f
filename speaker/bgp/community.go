package bgp

import (
	"fmt"
	"strconv"
	"strings"
)

// Well-known communities (RFC 1997, RFC 3765, RFC 7999).
var wellKnown = map[string]uint32{
	"no-export":           0xFFFFFF01,
	"no-advertise":        0xFFFFFF02,
	"no-export-subconfed": 0xFFFFFF03,
	"no-peer":             0xFFFFFF04,
	"blackhole":           0xFFFF029A,
}

// ParseCommunity reads "65000:100", a well-known name, or "large:64512:1:2". Exactly one of
// the results is meaningful: large is true for a large community.
func ParseCommunity(s string) (std uint32, lc LargeCommunity, large bool, err error) {
	if v, ok := wellKnown[s]; ok {
		return v, lc, false, nil
	}
	if rest, ok := strings.CutPrefix(s, "large:"); ok {
		f := strings.Split(rest, ":")
		if len(f) != 3 {
			return 0, lc, true, fmt.Errorf("community %q: want large:GLOBAL:LOCAL1:LOCAL2", s)
		}
		var n [3]uint32
		for i, x := range f {
			v, err := strconv.ParseUint(x, 10, 32)
			if err != nil {
				return 0, lc, true, fmt.Errorf("community %q: %q is not a number up to 4294967295", s, x)
			}
			n[i] = uint32(v)
		}
		return 0, LargeCommunity{n[0], n[1], n[2]}, true, nil
	}
	hi, lo, ok := strings.Cut(s, ":")
	a, errA := strconv.ParseUint(hi, 10, 16)
	b, errB := strconv.ParseUint(lo, 10, 16)
	if !ok || errA != nil || errB != nil {
		return 0, lc, false, fmt.Errorf("community %q: want AS:VALUE (each up to 65535), large:G:L1:L2 or a well-known name", s)
	}
	return uint32(a)<<16 | uint32(b), lc, false, nil
}

func communityString(c uint32) string {
	for name, v := range wellKnown {
		if v == c {
			return name
		}
	}
	return fmt.Sprintf("%d:%d", c>>16, c&0xFFFF)
}

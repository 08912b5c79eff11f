package bgp

import (
	"fmt"
	"testing"
)

// FuzzParseCommunity: any string is refused with an error or read into a value that prints
// back to a string meaning the same value; nothing panics.
func FuzzParseCommunity(f *testing.F) {
	for _, s := range []string{"65000:100", "0:0", "65535:65535", "no-export", "blackhole",
		"large:64512:1:2", "large:4294967295:0:4294967295", "65536:1", "1:", ":1", "large:1:2",
		"large:-1:2:3", "+1:2", "１:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		std, lc, large, err := ParseCommunity(s)
		if err != nil {
			return
		}
		var again string
		if large {
			again = fmt.Sprintf("large:%d:%d:%d", lc.Global, lc.Local1, lc.Local2)
		} else {
			again = communityString(std)
		}
		std2, lc2, large2, err := ParseCommunity(again)
		if err != nil || std2 != std || lc2 != lc || large2 != large {
			t.Fatalf("%q read as %q, which reads back as (%d, %v, %v, %v)", s, again, std2, lc2, large2, err)
		}
	})
}

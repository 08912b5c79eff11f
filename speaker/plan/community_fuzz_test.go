package plan

import (
	"testing"

	"github.com/portico-lb/portico/api/v1alpha1"
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
		var read Attrs
		if err := read.addCommunity(v1alpha1.Community(s)); err != nil {
			return
		}
		var again string
		if len(read.Large) == 1 {
			again = read.Large[0].String()
		} else {
			again = communityString(read.Communities[0])
		}
		var reread Attrs
		if err := reread.addCommunity(v1alpha1.Community(again)); err != nil || !reread.Equal(read) {
			t.Fatalf("%q read as %q, which reads back as %+v (%v)", s, again, reread, err)
		}
	})
}

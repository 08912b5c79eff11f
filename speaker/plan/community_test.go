package plan

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/portico-lb/portico/api/v1alpha1"
)

func TestParseCommunity(t *testing.T) {
	for _, tc := range []struct {
		in    string
		std   uint32
		large LargeCommunity
		isLg  bool
		err   string
	}{
		{in: "65000:100", std: 65000<<16 | 100},
		{in: "0:0"},
		{in: "no-export", std: 0xFFFFFF01},
		{in: "blackhole", std: 0xFFFF029A},
		{in: "large:64512:1:2", large: LargeCommunity{64512, 1, 2}, isLg: true},
		{in: "large:4294967295:0:4294967295", large: LargeCommunity{4294967295, 0, 4294967295}, isLg: true},
		{in: "65536:1", err: "each up to 65535"},
		{in: "65000", err: "want AS:VALUE"},
		{in: "large:1:2", err: "want large:GLOBAL:LOCAL1:LOCAL2"},
		{in: "large:1:2:4294967296", err: "is not a number up to 4294967295"},
	} {
		var got Attrs
		err := got.addCommunity(v1alpha1.Community(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !got.Equal(Attrs{}) {
				t.Errorf("%q: error %v and %+v, want an error containing %q and nothing added", tc.in, err, got, tc.err)
			}
			continue
		}
		want := Attrs{Communities: []uint32{tc.std}}
		if tc.isLg {
			want = Attrs{Large: []LargeCommunity{tc.large}}
		}
		if err != nil || !got.Equal(want) {
			t.Errorf("%q: got %+v, %v; want %+v", tc.in, got, err, want)
		}
		if !tc.isLg && communityString(tc.std) != tc.in {
			t.Errorf("%q prints as %q", tc.in, communityString(tc.std))
		}
	}
}

// TestPasswordNeverPrinted: however a Peer is formatted (logs, errors), its password stays out.
func TestPasswordNeverPrinted(t *testing.T) {
	p := Peer{Name: "tor", Address: netip.MustParseAddr("198.51.100.1"), Password: "s3cret"}
	d := BGP{Peers: map[string]Peer{"tor": p}}
	for _, s := range []string{fmt.Sprint(p), fmt.Sprintf("%v %+v %#v %s", p, p, p, p.Password), d.String(), fmt.Sprintf("%+v", d)} {
		if strings.Contains(s, "s3cret") {
			t.Fatalf("password printed: %s", s)
		}
	}
}

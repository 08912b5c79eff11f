package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
)

// TestL2GratuitousInterval: an L2Advertisement's gratuitousInterval makes the answering node
// announce its addresses again (gratuitous ARP, unsolicited NA) for switches whose forwarding
// table forgets its MAC (metallb#2910); without it, only the takeover announces. A client on
// the LAN counts what it hears of each address in a window after the takeover's own
// announcements (at once, then 0.1, 0.4 and 1 s after): the window holds window/interval
// repeats, give or take one, all from the owner, and none of the address left at the default.
func TestL2GratuitousInterval(t *testing.T) {
	inLab(t, func(t *testing.T, e *l2Env) {
		rec, err := netlab.RecordAnnouncements(e.Client)
		must(t, err)
		defer rec.Close()
		const every, window, after = 2 * time.Second, 10 * time.Second, 1500 * time.Millisecond
		v4, v6, off := netip.MustParseAddr("198.51.100.235"), netip.MustParseAddr("2001:db8:1::235"), netip.MustParseAddr("198.51.100.236")
		e.t = t
		repeat := v1alpha1.L2AdvertisementSpec{GratuitousInterval: &metav1.Duration{Duration: every}}
		e.create(scenario{name: "garp4", ip: v4, ad: repeat})
		e.create(scenario{name: "garp6", ip: v6, ad: repeat})
		e.create(scenario{name: "garp-off", ip: off})

		want := int(window / every)
		for _, ip := range []netip.Addr{v4, v6, off} {
			var owner []string
			waitFor(t, "one node reports "+ip.String(), 20*time.Second, func() bool {
				owner = e.announcers(ip)
				return len(owner) == 1 && !rec.First(ip).IsZero()
			})
			from := rec.First(ip).Add(after)
			waitFor(t, "the window of "+ip.String()+" to pass", after+window+5*time.Second, func() bool {
				return time.Since(from) > window
			})
			got := rec.Count(ip, from, from.Add(window))
			t.Logf("%s: %d announcements in %v after the takeover's, interval %v", ip, got, window, every)
			if ip == off {
				if got != 0 {
					t.Errorf("%s (no gratuitousInterval): %d announcements after the takeover's, want none", ip, got)
				}
				continue
			}
			if got < want-1 || got > want+1 {
				t.Errorf("%s: %d announcements in %v, want %d±1 (every %v)", ip, got, window, want, every)
			}
			if senders := rec.Senders(ip); !slices.Equal(senders, []string{e.macOf(owner[0])}) {
				t.Errorf("%s announced from %v, want only %s's %s", ip, senders, owner[0], e.macOf(owner[0]))
			}
			proto := map[bool]string{true: "arp", false: "ndp"}[ip.Is4()]
			series := fmt.Sprintf("portico_l2_gratuitous_periodic_total{protocol=%q}", proto)
			if n := e.metric(owner[0], series); n < float64(got) {
				t.Errorf("%s: %s is %v, fewer than the %d announcements heard", owner[0], series, n, got)
			}
		}
	})
}

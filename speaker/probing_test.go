package speaker

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// macs returns n distinct MACs, sorted as the prober reports them.
func macs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&0xff)
	}
	return out
}

// TestSelfCheckMACsAreCapped: a stranger answering a probe with many MACs gets the lowest
// MaxSelfCheckMACs listed and the rest counted; an ordinary answer is listed whole.
func TestSelfCheckMACsAreCapped(t *testing.T) {
	flooded, normal := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8")
	now := metav1.NewTime(time.Unix(1000, 0))
	r := selfCheckResults(map[netip.Addr][]string{flooded: macs(5000), normal: macs(1)}, nil, now)
	if len(r.checks) != 2 || r.omitted != 0 {
		t.Fatalf("%d entries, %d omitted; want 2 and 0", len(r.checks), r.omitted)
	}
	got := r.checks[0]
	if got.IP != flooded.String() || len(got.MACs) != v1alpha1.MaxSelfCheckMACs || got.OmittedMACs != 5000-v1alpha1.MaxSelfCheckMACs {
		t.Errorf("flooded entry: %s lists %d MACs, omits %d; want %d listed, %d omitted",
			got.IP, len(got.MACs), got.OmittedMACs, v1alpha1.MaxSelfCheckMACs, 5000-v1alpha1.MaxSelfCheckMACs)
	}
	if got.MACs[0] != "02:00:00:00:00:00" || got.MACs[3] != "02:00:00:00:00:03" {
		t.Errorf("flooded entry lists %v, want the four lowest", got.MACs)
	}
	if n := r.checks[1]; len(n.MACs) != 1 || n.OmittedMACs != 0 {
		t.Errorf("ordinary entry: %v, %d omitted", n.MACs, n.OmittedMACs)
	}

	// The same flood in the next round keeps its time: nothing to write.
	later := metav1.NewTime(now.Add(10 * time.Second))
	again := selfCheckResults(map[netip.Addr][]string{flooded: macs(5000), normal: macs(1)}, r.checks, later)
	if !again.checks[0].Time.Equal(&now) {
		t.Errorf("an unchanged truncated answer got a new time %v", again.checks[0].Time)
	}
	// One more MAC beyond the listed ones is a change.
	more := selfCheckResults(map[netip.Addr][]string{flooded: macs(5001), normal: macs(1)}, r.checks, later)
	if !more.checks[0].Time.Equal(&later) {
		t.Errorf("a change in the omitted count kept the old time %v", more.checks[0].Time)
	}
}

// TestSelfChecksAreCapped: over MaxSelfChecks results, the problems (no answer, several) are
// all kept, the clean answers fill the rest in address order, and the others are counted.
func TestSelfChecksAreCapped(t *testing.T) {
	results := map[netip.Addr][]string{}
	ip := netip.MustParseAddr("2001:db8::1")
	for range v1alpha1.MaxSelfChecks + 100 {
		results[ip] = macs(1)
		ip = ip.Next()
	}
	// Problems at the end of the address order, which a plain cut would drop.
	last := ip.Prev()
	results[last] = nil
	results[last.Prev()] = macs(2)
	r := selfCheckResults(results, nil, metav1.Now())
	if len(r.checks) != v1alpha1.MaxSelfChecks || r.omitted != 100 {
		t.Fatalf("%d entries, %d omitted; want %d and 100", len(r.checks), r.omitted, v1alpha1.MaxSelfChecks)
	}
	kept := map[string]bool{}
	for _, c := range r.checks {
		kept[c.IP] = true
	}
	for _, want := range []netip.Addr{last, last.Prev(), netip.MustParseAddr("2001:db8::1")} {
		if !kept[want.String()] {
			t.Errorf("%s left out", want)
		}
	}
	for i := 1; i < len(r.checks); i++ {
		if r.checks[i-1].IP >= r.checks[i].IP {
			t.Fatalf("entries not sorted by IP: %s before %s", r.checks[i-1].IP, r.checks[i].IP)
		}
	}
}

// TestForeignAnswers: a round's answers keep only foreign MACs, keep the time each was first
// heard, list one entry per address and MAC (the lowest interface), and stop at the cap with
// the lowest addresses.
func TestForeignAnswers(t *testing.T) {
	ip := netip.MustParseAddr
	then := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := metav1.NewTime(then.Add(time.Minute))
	prev := []v1alpha1.ForeignAnswer{{IP: "10.0.0.201", MAC: "52:54:00:00:00:99", Interface: "eth0", Since: then}}
	got := foreignAnswers([]heardAnswer{
		{ip("10.0.0.201"), "52:54:00:00:00:99", "eth1"},
		{ip("10.0.0.201"), "52:54:00:00:00:99", "eth0"},
		{ip("10.0.0.200"), "02:00:00:00:00:0a", "eth0"}, // this node's own MAC
		{ip("2001:db8::10"), "52:54:00:00:00:98", "eth0"},
		{ip("10.0.0.9"), "52:54:00:00:00:97", "eth0"},
	}, []string{"02:00:00:00:00:0a"}, prev, now)
	want := []v1alpha1.ForeignAnswer{
		{IP: "10.0.0.9", MAC: "52:54:00:00:00:97", Interface: "eth0", Since: now},
		{IP: "10.0.0.201", MAC: "52:54:00:00:00:99", Interface: "eth0", Since: then},
		{IP: "2001:db8::10", MAC: "52:54:00:00:00:98", Interface: "eth0", Since: now},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}

	var many []heardAnswer
	for i := range 300 {
		many = append(many, heardAnswer{netip.AddrFrom4([4]byte{10, 0, byte(i / 256), byte(i)}), "52:54:00:00:00:99", "eth0"})
	}
	capped := foreignAnswers(many, nil, nil, now)
	if len(capped) != v1alpha1.MaxForeignAnswers || capped[0].IP != "10.0.0.0" || capped[len(capped)-1].IP != "10.0.0.63" {
		t.Errorf("a LAN answering for 300 addresses: %d entries, %s to %s; want %d, the lowest", len(capped), capped[0].IP, capped[len(capped)-1].IP, v1alpha1.MaxForeignAnswers)
	}
}

// TestForeignRoundStatus: a round that heard anything puts its answers and its time in the
// Speaker status (the controller counts them only while that time is recent); a quiet round,
// or none yet, puts neither, so a quiet speaker writes nothing each round.
func TestForeignRoundStatus(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	answers := []v1alpha1.ForeignAnswer{{IP: "10.0.0.200", MAC: "52:54:00:00:00:99", Interface: "eth0", Since: at}}
	var st v1alpha1.SpeakerStatus
	(&foreignRound{answers: answers, at: at}).setForeign(&st)
	if len(st.ForeignAnswers) != 1 || st.ProbedAt == nil || !st.ProbedAt.Equal(&at) {
		t.Errorf("a round with answers: foreignAnswers %v, probedAt %v; want the answers and %v", st.ForeignAnswers, st.ProbedAt, at)
	}
	for name, r := range map[string]*foreignRound{"quiet round": {at: at}, "no round yet": nil} {
		var st v1alpha1.SpeakerStatus
		r.setForeign(&st)
		if st.ForeignAnswers != nil || st.ProbedAt != nil {
			t.Errorf("%s: foreignAnswers %v, probedAt %v; want neither", name, st.ForeignAnswers, st.ProbedAt)
		}
	}
}

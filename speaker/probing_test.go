package speaker

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
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
	prev := []keptAnswer{{ForeignAnswer: v1alpha1.ForeignAnswer{IP: "10.0.0.201", MAC: "52:54:00:00:00:99", Interface: "eth0", Since: then}}}
	targets := []netip.Addr{ip("10.0.0.9"), ip("10.0.0.200"), ip("10.0.0.201"), ip("2001:db8::10")}
	got := foreignAnswers([]heardAnswer{
		{ip("10.0.0.201"), "52:54:00:00:00:99", "eth1"},
		{ip("10.0.0.201"), "52:54:00:00:00:99", "eth0"},
		{ip("10.0.0.200"), "02:00:00:00:00:0a", "eth0"}, // this node's own MAC
		{ip("2001:db8::10"), "52:54:00:00:00:98", "eth0"},
		{ip("10.0.0.9"), "52:54:00:00:00:97", "eth0"},
	}, []string{"02:00:00:00:00:0a"}, targets, prev, 3, now)
	want := []keptAnswer{
		{ForeignAnswer: v1alpha1.ForeignAnswer{IP: "10.0.0.9", MAC: "52:54:00:00:00:97", Interface: "eth0", Since: now}},
		{ForeignAnswer: v1alpha1.ForeignAnswer{IP: "10.0.0.201", MAC: "52:54:00:00:00:99", Interface: "eth0", Since: then}},
		{ForeignAnswer: v1alpha1.ForeignAnswer{IP: "2001:db8::10", MAC: "52:54:00:00:00:98", Interface: "eth0", Since: now}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}

	var many []heardAnswer
	for i := range 300 {
		many = append(many, heardAnswer{netip.AddrFrom4([4]byte{10, 0, byte(i / 256), byte(i)}), "52:54:00:00:00:99", "eth0"})
	}
	capped := foreignAnswers(many, nil, nil, nil, 3, now)
	if len(capped) != v1alpha1.MaxForeignAnswers || capped[0].IP != "10.0.0.0" || capped[len(capped)-1].IP != "10.0.0.63" {
		t.Errorf("a LAN answering for 300 addresses: %d entries, %s to %s; want %d, the lowest", len(capped), capped[0].IP, capped[len(capped)-1].IP, v1alpha1.MaxForeignAnswers)
	}
}

// TestForeignAnswersKept: rounds in a row, each with the answers heard (ip=mac) and the
// targets, and the list after it (ip=mac@round first heard+rounds missed). An answer a round
// misses is kept until its MAC has left the address unanswered for forgetAfter (3) rounds in a
// row, keeping its time; heard again, it starts over. An address no longer a target goes at
// once, as does an answer from a MAC now this node's. A new MAC for a kept address is listed
// beside the old one.
func TestForeignAnswersKept(t *testing.T) {
	const a, b, c = "52:54:00:00:00:0a", "52:54:00:00:00:0b", "52:54:00:00:00:0c"
	const ours = "02:00:00:00:00:01"
	all := "10.0.0.201 10.0.0.202 10.0.0.203"
	for _, tc := range []struct {
		name   string
		rounds []round
	}{
		{"missed one round, kept with its time, then heard again", []round{
			{heard: "10.0.0.203=" + a, targets: all, want: "10.0.0.203=" + a + "@0+0"},
			{heard: "", targets: all, want: "10.0.0.203=" + a + "@0+1"},
			{heard: "10.0.0.203=" + a, targets: all, want: "10.0.0.203=" + a + "@0+0"},
		}},
		{"missed 3 rounds in a row, dropped; heard in between, kept", []round{
			{heard: "10.0.0.201=" + a + " 10.0.0.202=" + b, targets: all, want: "10.0.0.201=" + a + "@0+0 10.0.0.202=" + b + "@0+0"},
			{heard: "10.0.0.202=" + b, targets: all, want: "10.0.0.201=" + a + "@0+1 10.0.0.202=" + b + "@0+0"},
			{heard: "", targets: all, want: "10.0.0.201=" + a + "@0+2 10.0.0.202=" + b + "@0+1"},
			{heard: "10.0.0.202=" + b, targets: all, want: "10.0.0.202=" + b + "@0+0"},
			{heard: "", targets: all, want: "10.0.0.202=" + b + "@0+1"},
			{heard: "", targets: all, want: "10.0.0.202=" + b + "@0+2"},
			{heard: "", targets: all, want: ""},
			{heard: "10.0.0.202=" + b, targets: all, want: "10.0.0.202=" + b + "@7+0"},
		}},
		{"no longer a target, dropped at once", []round{
			{heard: "10.0.0.201=" + a + " 10.0.0.202=" + b, targets: all, want: "10.0.0.201=" + a + "@0+0 10.0.0.202=" + b + "@0+0"},
			{heard: "", targets: "10.0.0.202 10.0.0.203", want: "10.0.0.202=" + b + "@0+1"},
			{heard: "", targets: "", want: ""},
		}},
		{"a new MAC for a kept address, listed beside it", []round{
			{heard: "10.0.0.201=" + a, targets: all, want: "10.0.0.201=" + a + "@0+0"},
			{heard: "10.0.0.201=" + c, targets: all, want: "10.0.0.201=" + a + "@0+1 10.0.0.201=" + c + "@1+0"},
			{heard: "10.0.0.201=" + c, targets: all, want: "10.0.0.201=" + a + "@0+2 10.0.0.201=" + c + "@1+0"},
			{heard: "10.0.0.201=" + c, targets: all, want: "10.0.0.201=" + c + "@1+0"},
		}},
		{"a kept answer from a MAC now this node's, dropped", []round{
			{heard: "10.0.0.201=" + ours, targets: all, ours: "", want: "10.0.0.201=" + ours + "@0+0"},
			{heard: "", targets: all, ours: ours, want: ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var prev []keptAnswer
			for i, r := range tc.rounds {
				prev = foreignAnswers(r.heardAnswers(t), strings.Fields(r.ours), r.targetAddrs(), prev, 3, roundTime(i))
				if got := keptString(prev); got != r.want {
					t.Fatalf("round %d (heard %q): list %q; want %q", i, r.heard, got, r.want)
				}
			}
		})
	}
}

// TestForeignAnswersKeptCap: kept answers count toward the cap like heard ones, the lowest
// addresses first, and forgetAfter 1 keeps nothing a round missed.
func TestForeignAnswersKeptCap(t *testing.T) {
	var high, low []heardAnswer
	var targets []netip.Addr
	for i := range v1alpha1.MaxForeignAnswers {
		high = append(high, heardAnswer{netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}), "52:54:00:00:00:0a", "eth0"})
		low = append(low, heardAnswer{netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), "52:54:00:00:00:0b", "eth0"})
	}
	for _, h := range append(slices.Clone(low), high...) {
		targets = append(targets, h.ip)
	}
	kept := foreignAnswers(high, nil, targets, nil, 3, roundTime(0))
	// Half the low ones answer next round: they and the lowest kept high ones fill the cap.
	got := foreignAnswers(low[:v1alpha1.MaxForeignAnswers/2], nil, targets, kept, 3, roundTime(1))
	if len(got) != v1alpha1.MaxForeignAnswers || got[0].IP != "10.0.0.0" || got[len(got)-1].IP != fmt.Sprintf("10.0.1.%d", v1alpha1.MaxForeignAnswers/2-1) {
		t.Errorf("%d entries, %s to %s; want %d, 10.0.0.0 to 10.0.1.%d", len(got), got[0].IP, got[len(got)-1].IP, v1alpha1.MaxForeignAnswers, v1alpha1.MaxForeignAnswers/2-1)
	}
	if gone := foreignAnswers(nil, nil, targets, kept, 1, roundTime(1)); len(gone) != 0 {
		t.Errorf("forgetAfter 1 kept %d answers a round missed", len(gone))
	}
}

// round is one probe round of TestForeignAnswersKept: heard and targets in, the list out.
type round struct {
	heard, targets, ours, want string
}

func (r round) heardAnswers(t *testing.T) []heardAnswer {
	var out []heardAnswer
	for _, f := range strings.Fields(r.heard) {
		ip, mac, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("bad answer %q", f)
		}
		out = append(out, heardAnswer{netip.MustParseAddr(ip), mac, "eth0"})
	}
	return out
}

func (r round) targetAddrs() []netip.Addr {
	var out []netip.Addr
	for _, f := range strings.Fields(r.targets) {
		out = append(out, netip.MustParseAddr(f))
	}
	return out
}

// roundTime is when round i ended: 30 s apart.
func roundTime(i int) metav1.Time {
	return metav1.NewTime(time.Date(2026, 12, 6, 5, 35, 0, 0, time.UTC).Add(time.Duration(i) * 30 * time.Second))
}

// keptString lists answers as ip=mac@round first heard+rounds missed.
func keptString(answers []keptAnswer) string {
	var out []string
	for _, k := range answers {
		first := int(k.Since.Sub(roundTime(0).Time) / (30 * time.Second))
		out = append(out, fmt.Sprintf("%s=%s@%d+%d", k.IP, k.MAC, first, k.missed))
	}
	return strings.Join(out, " ")
}

// TestForeignRoundStatus: a round that heard anything puts its answers and its time in the
// Speaker status (the controller counts them only while that time is recent); a quiet round,
// or none yet, puts neither, so a quiet speaker writes nothing each round.
func TestForeignRoundStatus(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	answers := []keptAnswer{{ForeignAnswer: v1alpha1.ForeignAnswer{IP: "10.0.0.200", MAC: "52:54:00:00:00:99", Interface: "eth0", Since: at}, missed: 1}}
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

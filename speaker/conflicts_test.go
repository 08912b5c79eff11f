package speaker

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/plan/plantest"
)

// TestConflictTranscripts runs testdata/conflicts/*.txt: which node probes which of the
// addresses pools hand out next. The L2 scenario language (nodes, pool, l2adv, service, kill,
// ...) builds the cluster; besides it:
//
//	next POOL A B ...    the pool's status.nextAddresses, as the controller writes them
//	inuse POOL A ...     the pool's status.inUse addresses
//	probes               per running speaker, the addresses it probes (and the interfaces
//	                     its advertisements name, when they do)
func TestConflictTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/conflicts", func(t *testing.T, path string) {
		s := plantest.NewL2Scenario()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "next", "inuse":
				p, ok := s.Pools[d.CmdArgs[0].Key]
				if !ok {
					t.Fatalf("%s: no pool %q", d.Pos, d.CmdArgs[0].Key)
				}
				addrs := plantest.Bare(d.CmdArgs[1:])
				if d.Cmd == "next" {
					p.Status.NextAddresses = addrs
					return "ok"
				}
				p.Status.InUse = nil
				for _, a := range addrs {
					p.Status.InUse = append(p.Status.InUse, v1alpha1.AddressInUse{Address: a, MAC: "52:54:00:00:00:99"})
				}
				return "ok"
			case "probes":
				return probes(s)
			}
			if err := s.Run(d); err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			return "ok"
		})
	})
}

// probes lists, per running speaker, the addresses it probes.
func probes(s *plantest.L2Scenario) string {
	var b strings.Builder
	w := s.World()
	for _, n := range slices.Sorted(maps.Keys(s.Nodes)) {
		if s.Down[n] {
			fmt.Fprintf(&b, "%s: speaker down\n", n)
			continue
		}
		var addrs []string
		for _, t := range conflictTargets(w, n, s.Alive(n)) {
			a := t.ip.String()
			if t.interfaces != nil {
				a += " on " + strings.Join(t.interfaces, ",")
			}
			addrs = append(addrs, a)
		}
		fmt.Fprintf(&b, "%s: %s\n", n, strings.Join(addrs, ", "))
	}
	return b.String()
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

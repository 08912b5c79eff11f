package plan_test

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/plan"
	"github.com/portico-lb/portico/speaker/plan/plantest"
	"github.com/portico-lb/portico/speaker/status"
)

// TestL2Transcripts runs testdata/l2/*.txt: who answers for which address over L2, as every
// node computes it alone from the cluster's objects and its own view of the gossip group, and
// the Speaker status each writes. The scenario language (nodes, pool, l2adv, service, kill,
// partition, heal, plan all, ...) is described in docs/testing.md.
func TestL2Transcripts(t *testing.T) {
	datadriven.Walk(t, "testdata/l2", func(t *testing.T, path string) {
		s := &l2Transcript{L2Scenario: plantest.NewL2Scenario()}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if err := s.Run(d); err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			if d.Cmd == "plan" {
				return s.plan()
			}
			return "ok"
		})
	})
}

// l2Transcript is an L2 scenario and who answered each address at its last plan all.
type l2Transcript struct {
	*plantest.L2Scenario
	answered map[netip.Addr][]string
	planned  bool
}

// plan plans as every running speaker would and prints what each writes.
func (s *l2Transcript) plan() string {
	var b strings.Builder
	s.Clock = s.Clock.Add(time.Second)
	w := s.World()
	answered := map[netip.Addr][]string{}
	for _, n := range slices.Sorted(maps.Keys(s.Nodes)) {
		if s.Down[n] {
			fmt.Fprintf(&b, "%s: speaker down\n", n)
			continue
		}
		p := plan.Make(w, n, v1alpha1.DefaultLoadBalancerClass, s.Alive(n))
		ifaces := map[netip.Addr][]string{}
		for ip, c := range p.Mine {
			ifaces[ip] = c.Interfaces
			answered[ip] = append(answered[ip], n)
		}
		r := status.OfPlan(p, ifaces)
		fmt.Fprintf(&b, "%s: Ready=%s L2=%d%s\n", n, r.Ready.Status, r.Status.L2Announcements, s.view(n))
		for _, a := range r.Status.Announcements {
			on := ""
			if len(a.Interfaces) > 0 {
				on = " on " + strings.Join(a.Interfaces, ",")
			}
			fmt.Fprintf(&b, "  %s %s%s\n", a.IP, a.Service, on)
		}
		for _, e := range r.Status.ConfigErrors {
			fmt.Fprintf(&b, "  config error: %s\n", e)
		}
	}
	addrs := s.addresses()
	for _, ip := range slices.SortedFunc(maps.Keys(addrs), netip.Addr.Compare) {
		switch who := answered[ip]; {
		case len(who) == 0:
			fmt.Fprintf(&b, "unanswered: %s (%s)\n", ip, addrs[ip])
		case len(who) > 1:
			fmt.Fprintf(&b, "split: %s answered by %s\n", ip, strings.Join(who, ", "))
		}
	}
	if s.planned {
		for _, ip := range slices.SortedFunc(maps.Keys(addrs), netip.Addr.Compare) {
			if before, now := s.answered[ip], answered[ip]; !slices.Equal(before, now) {
				fmt.Fprintf(&b, "moved: %s %s -> %s\n", ip, nobodyOr(before), nobodyOr(now))
			}
		}
	}
	s.answered, s.planned = answered, true
	s.Wrote(answered)
	return b.String()
}

// view shows a partitioned node's members.
func (s *l2Transcript) view(me string) string {
	if len(s.Side) == 0 {
		return ""
	}
	var sees []string
	for _, n := range slices.Sorted(maps.Keys(s.Nodes)) {
		if s.Alive(me)(n) {
			sees = append(sees, n)
		}
	}
	return " (sees " + strings.Join(sees, " ") + ")"
}

// addresses are the Services' addresses (of any class), with the Services holding each.
func (s *l2Transcript) addresses() map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, key := range slices.Sorted(maps.Keys(s.Services)) {
		for _, ip := range v1alpha1.IngressAddrs(s.Services[key]) {
			out[ip] = strings.TrimPrefix(out[ip]+","+key, ",")
		}
	}
	return out
}

func nobodyOr(nodes []string) string {
	if len(nodes) == 0 {
		return "nobody"
	}
	return strings.Join(nodes, ",")
}

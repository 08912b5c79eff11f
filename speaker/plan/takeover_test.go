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
)

// TestTakeoverTranscripts runs testdata/takeover/*.txt: which addresses each node hands off to
// the node that answered for them before, to which node address, and when that ends. The L2
// scenario language builds the cluster (ips NODE A... gives a node its InternalIPs); each
// running speaker keeps its Planner from one plan all to the next, as a speaker does (a killed
// one loses it), and every hand-off it asks for succeeds. plan all prints, per node, what
// starts and ends, and the takeovers it then holds; handoff grace=D linger=D sets the
// speakers' --l2-handoff-grace and --l2-handoff-linger (10m and 1m until then).
func TestTakeoverTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/takeover", func(t *testing.T, path string) {
		s := &takeoverScenario{L2Scenario: plantest.NewL2Scenario(), nodes: map[string]*takeoverNode{},
			times: plan.TakeoverTimes{Grace: 10 * time.Minute, Linger: time.Minute}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "handoff":
				for _, a := range d.CmdArgs {
					v, err := time.ParseDuration(a.Vals[0])
					if err != nil {
						t.Fatalf("%s: %v", d.Pos, err)
					}
					if a.Key == "grace" {
						s.times.Grace = v
					} else {
						s.times.Linger = v
					}
				}
				return "ok"
			}
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

type takeoverScenario struct {
	*plantest.L2Scenario
	nodes map[string]*takeoverNode
	times plan.TakeoverTimes
}

// takeoverNode is what one running speaker keeps between plans.
type takeoverNode struct {
	planner *plan.Planner
	owned   map[netip.Addr]plan.Claim
	held    map[netip.Addr]plan.Takeover
}

func (s *takeoverScenario) plan() string {
	var b strings.Builder
	s.Clock = s.Clock.Add(time.Second)
	w := s.World()
	answered := map[netip.Addr][]string{}
	for _, n := range slices.Sorted(maps.Keys(s.Nodes)) {
		if s.Down[n] {
			delete(s.nodes, n)
			fmt.Fprintf(&b, "%s: speaker down\n", n)
			continue
		}
		tn := s.nodes[n]
		if tn == nil {
			tn = &takeoverNode{planner: plan.NewPlanner(n, v1alpha1.DefaultLoadBalancerClass), owned: map[netip.Addr]plan.Claim{}}
			s.nodes[n] = tn
		}
		tn.planner.Replan(w, s.Alive(n))
		p := tn.planner.Plan()
		touched := slices.SortedFunc(maps.Keys(p.Mine), netip.Addr.Compare)
		for ip := range tn.owned {
			if _, still := p.Mine[ip]; !still {
				touched = append(touched, ip)
			}
		}
		steps := tn.planner.Takeovers(tn.held, touched, nil, s.Clock, s.times)
		tn.held = steps.Keep
		maps.Copy(tn.held, steps.Start)
		tn.owned = maps.Clone(p.Mine)
		for ip := range p.Mine {
			answered[ip] = append(answered[ip], n)
		}
		s.print(&b, n, steps, tn.held)
	}
	s.Wrote(answered)
	return b.String()
}

// print tells one node's steps and the takeovers it holds after them.
func (s *takeoverScenario) print(b *strings.Builder, node string, steps plan.TakeoverSteps, held map[netip.Addr]plan.Takeover) {
	at := func(t time.Time) string { return t.Sub(plantest.ScenarioEpoch).String() }
	fmt.Fprintf(b, "%s:\n", node)
	for _, ip := range slices.SortedFunc(maps.Keys(steps.End), netip.Addr.Compare) {
		fmt.Fprintf(b, "  ends %s (to %s)\n", ip, steps.End[ip].Node)
	}
	for _, ip := range slices.SortedFunc(maps.Keys(steps.NoAddress), netip.Addr.Compare) {
		fmt.Fprintf(b, "  cannot hand off %s: %s has no address of its family\n", ip, steps.NoAddress[ip])
	}
	for _, ip := range slices.SortedFunc(maps.Keys(steps.Start), netip.Addr.Compare) {
		fmt.Fprintf(b, "  starts %s\n", ip)
	}
	for _, ip := range slices.SortedFunc(maps.Keys(held), netip.Addr.Compare) {
		e := held[ip]
		fmt.Fprintf(b, "  holds %s to %s via %s, picks up until %s", ip, e.Node, e.Via, at(e.Until))
		if !e.Back.IsZero() {
			fmt.Fprintf(b, ", %s answers since %s", e.Node, at(e.Back))
		}
		b.WriteString("\n")
	}
	if !steps.LingerEnds.IsZero() {
		fmt.Fprintf(b, "  plans again at %s (a linger ends)\n", at(steps.LingerEnds))
	}
}

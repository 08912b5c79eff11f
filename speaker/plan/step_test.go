package plan_test

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/plan"
)

// TestStepTranscripts runs testdata/step/*.txt: what one pass of the speaker's loop does with a
// plan (plan.Decide), given what changed and what the sides hold.
//
//	plan [mine=(A,...)] [routed=(A,...)] [standing=S]     the plan: L2 and BGP addresses, this
//	                                                      node's standing (a route per address to peer tor)
//	applied [mine=(A,...)] [routed=(A,...)] [standing=S] [answering] [bgp-failed]
//	                                                      what the sides hold
//	step [all] [mine=(A,...)] [routed=(A,...)] [joined] [share-flows]
//	                                                      one pass: everything changed, or the L2 and BGP
//	                                                      claims (and their routes) named; then the
//	                                                      sides hold what it applied
//
// S: advertise, graceful-shutdown, withdraw, unknown.
func TestStepTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/step", func(t *testing.T, path string) {
		var p plan.Plan
		a := plan.Applied{Standing: plan.UnknownStanding}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			args := stepArgs(d)
			switch d.Cmd {
			case "plan":
				p = plan.Plan{Mine: map[netip.Addr]plan.Claim{}, Routed: map[netip.Addr]plan.BGPClaim{},
					BGP: plan.BGP{Routes: map[string]map[netip.Prefix]plan.Route{"tor": {}}}, Standing: standing(args["standing"])}
				for _, ip := range addrs(args["mine"]) {
					p.Mine[ip] = plan.Claim{}
				}
				for _, ip := range addrs(args["routed"]) {
					p.Routed[ip] = plan.BGPClaim{}
					p.BGP.Routes["tor"][netip.PrefixFrom(ip, ip.BitLen())] = plan.Route{}
				}
				return "ok"
			case "applied":
				a = plan.Applied{Mine: map[netip.Addr]plan.Claim{}, Routed: map[netip.Addr]plan.BGPClaim{}, Standing: standing(args["standing"]),
					Answering: args["answering"] != nil, BGPFailed: args["bgp-failed"] != nil}
				for _, ip := range addrs(args["mine"]) {
					a.Mine[ip] = plan.Claim{}
				}
				for _, ip := range addrs(args["routed"]) {
					a.Routed[ip] = plan.BGPClaim{}
				}
				return "ok"
			case "step":
				in := plan.Pass{Changes: plan.Changes{All: args["all"] != nil, Mine: addrs(args["mine"]), Routed: addrs(args["routed"])},
					Joined: args["joined"] != nil, ShareFlows: args["share-flows"] != nil}
				for _, ip := range in.Changes.Routed {
					if in.Changes.Routes == nil {
						in.Changes.Routes = map[string][]netip.Prefix{}
					}
					in.Changes.Routes["tor"] = append(in.Changes.Routes["tor"], netip.PrefixFrom(ip, ip.BitLen()))
				}
				acts := plan.Decide(p, in, a)
				a = plan.Applied{Mine: maps.Clone(p.Mine), Routed: maps.Clone(p.Routed), Standing: acts.Standing,
					Answering: a.Answering || acts.Answer, BGPFailed: false}
				return actions(acts)
			}
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		})
	})
}

// stepArgs are a command's arguments by key (a key without values maps to an empty list).
func stepArgs(d *datadriven.TestData) map[string][]string {
	out := map[string][]string{}
	for _, a := range d.CmdArgs {
		out[a.Key] = []string{}
		for _, v := range a.Vals {
			out[a.Key] = append(out[a.Key], strings.FieldsFunc(v, func(r rune) bool { return r == ',' })...)
		}
	}
	return out
}

func addrs(s []string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func standing(s []string) rules.BGPStanding {
	switch strings.Join(s, "") {
	case "advertise":
		return rules.BGPAdvertise
	case "graceful-shutdown":
		return rules.BGPGracefulShutdown
	case "withdraw":
		return rules.BGPWithdraw
	}
	return plan.UnknownStanding
}

// actions prints one pass's actions in the order the sides carry them out.
func actions(acts plan.Actions) string {
	var b strings.Builder
	line := func(what string, ips []netip.Addr) {
		if len(ips) > 0 {
			fmt.Fprintf(&b, "%s %v\n", what, ips)
		}
	}
	line("guard takes", acts.GuardAdd)
	line("L2 claims touched", acts.L2)
	if acts.Answer {
		b.WriteString("announcer handed the L2 addresses\n")
	}
	if acts.Reannounce {
		b.WriteString("every L2 address announced again\n")
	}
	line("starts answering", acts.Gained)
	line("flows shared before and after", acts.Share)
	switch {
	case acts.BGP == nil:
	case acts.BGP.Changed == nil:
		b.WriteString("router handed every route\n")
	default:
		var changed []string
		for _, peer := range slices.Sorted(maps.Keys(acts.BGP.Changed)) {
			changed = append(changed, fmt.Sprint(peer, " ", acts.BGP.Changed[peer]))
		}
		fmt.Fprintf(&b, "router handed the routes changed: %s\n", strings.Join(changed, "; "))
	}
	line("BGP claims touched", acts.Routed)
	line("guard lets go", acts.GuardRemove)
	if b.Len() == 0 {
		return "nothing"
	}
	return b.String()
}

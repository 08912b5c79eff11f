package plan_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/portico-lb/portico/speaker/plan"
)

// TestAPIReadyTranscripts runs testdata/apiready/*.txt: a node's eligibility for the
// control-plane VIP as its apiserver's /readyz checks come in. Commands:
//
//	new failures=N successes=M  a node that has not checked yet
//	check                       one line per check: "ok" or why it failed; prints the state
//	                            after each, and "changed" when the eligibility changed
func TestAPIReadyTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/apiready", func(t *testing.T, path string) {
		var r plan.APIReady
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "new":
				var failures, successes int
				d.ScanArgs(t, "failures", &failures)
				d.ScanArgs(t, "successes", &successes)
				r = plan.NewAPIReady(failures, successes)
				return r.String() + "\n"
			case "check":
				var out strings.Builder
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					failure := strings.TrimSpace(line)
					if failure == "ok" {
						failure = ""
					}
					changed := r.Observe(failure)
					fmt.Fprintf(&out, "%s: %s", strings.TrimSpace(line), r)
					if changed {
						out.WriteString(" (changed)")
					}
					out.WriteString("\n")
				}
				return out.String()
			}
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		})
	})
}

// TestControlPlaneTranscripts runs testdata/controlplane/*.txt: who holds the control-plane
// VIP. Commands, times in seconds from the transcript's start:
//
//	members vip=IP N...       the configured members, all alive, none heard from
//	alive N...                the members the gossip sees alive
//	report N [eligible] [holding=S]  what member N last said of itself
//	decide                    the owner and the eligible members
//	keep-local N released=MS now=MS  whether member N, which stopped answering MS ms after
//	                          the start, still keeps the VIP a local address at now
func TestControlPlaneTranscripts(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	datadriven.Walk(t, "testdata/controlplane", func(t *testing.T, path string) {
		var v plan.ControlPlaneView
		var alive []string
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "members":
				var vip string
				d.ScanArgs(t, "vip", &vip)
				v = plan.ControlPlaneView{VIP: netip.MustParseAddr(vip), Reports: map[string]plan.MemberReport{}}
				v.Members = argKeys(d, "vip")
				alive = slices.Clone(v.Members)
				v.Alive = func(n string) bool { return slices.Contains(alive, n) }
				return ""
			case "alive":
				alive = argKeys(d)
				return ""
			case "report":
				var r plan.MemberReport
				r.Eligible = d.HasArg("eligible")
				if d.HasArg("holding") {
					var s int
					d.ScanArgs(t, "holding", &s)
					r.Holding = start.Add(time.Duration(s) * time.Second)
				}
				v.Reports[d.CmdArgs[0].Key] = r
				return ""
			case "decide":
				got := plan.ControlPlaneOwner(v)
				owner := got.Owner
				if owner == "" {
					owner = "none"
				}
				return fmt.Sprintf("owner: %s (eligible: %s)\n", owner, strings.Join(got.Eligible, " "))
			case "keep-local":
				var released, now int
				d.ScanArgs(t, "released", &released)
				d.ScanArgs(t, "now", &now)
				ms := func(n int) time.Time { return start.Add(time.Duration(n) * time.Millisecond) }
				return fmt.Sprintf("keep local: %t\n", plan.ControlPlaneOwner(v).KeepLocal(v, d.CmdArgs[0].Key, ms(released), ms(now)))
			}
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		})
	})
}

// argKeys are the command's arguments' keys, but those named in skip.
func argKeys(d *datadriven.TestData, skip ...string) []string {
	var out []string
	for _, a := range d.CmdArgs {
		if !slices.Contains(skip, a.Key) {
			out = append(out, a.Key)
		}
	}
	return out
}

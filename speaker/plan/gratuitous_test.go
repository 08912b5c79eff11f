package plan_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/portico-lb/portico/speaker/plan"
)

// TestGratuitousTranscripts runs testdata/gratuitous/*.txt: when each address is announced
// again. Commands, the time in seconds from the transcript's start:
//
//	set at=S [IP=D ...]  the addresses announced again and how often (plan.GratuitousOf)
//	due at=S             the addresses due at S, and when the next one is
func TestGratuitousTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/gratuitous", func(t *testing.T, path string) {
		var g plan.Gratuitous
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var at int
			d.ScanArgs(t, "at", &at)
			now := start.Add(time.Duration(at) * time.Second)
			var out strings.Builder
			switch d.Cmd {
			case "set":
				every := map[netip.Addr]time.Duration{}
				for _, a := range d.CmdArgs {
					if a.Key == "at" {
						continue
					}
					dur, err := time.ParseDuration(a.Vals[0])
					if err != nil {
						return "error: " + err.Error()
					}
					every[netip.MustParseAddr(a.Key)] = dur
				}
				g.Set(every, now)
			case "due":
				due := g.Due(now)
				if len(due) == 0 {
					out.WriteString("none due")
				}
				for i, ip := range due {
					if i > 0 {
						out.WriteString(" ")
					}
					out.WriteString(ip.String())
				}
				out.WriteString("\n")
			default:
				t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			}
			if next := g.Next(); next.IsZero() {
				out.WriteString("next: none\n")
			} else {
				fmt.Fprintf(&out, "next: %ds\n", int(next.Sub(start).Seconds()))
			}
			return out.String()
		})
	})
}

package decide

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNewsTranscripts pins which health conditions become events, and when, on the Service or
// on its pool (testdata/news/*.txt). Commands:
//
//	start at=<d> [after=<d>]          a leader starts (times are offsets from a fixed epoch)
//	stored [svc=<ns/name>] [count=<n>] [pool=<p>] <Type>=<Status> [reason=<r>] since=<d>
//	                                  the Service's stored condition and its lastTransitionTime
//	                                  (svc defaults to ns/web; count=n stores it for ns/s-00 ...
//	                                  ns/s-<n-1> instead; pool is where the address came from)
//	review at=<d> [svc=<ns/name>] [count=<n>]
//	                                  what the desk tells, and when it looks again (count=n:
//	                                  reviews ns/s-00 ... in turn, and adds up the quiet ones)
//	shared pool=<p>                   the pool's shared problems, as its condition says them
//	hold                              a new leader's desk: pools unknown until expect's are reviewed
//	expect [svc=<ns/name>] [count=<n>]
//	                                  the Services the leader found with their conditions
//	forget [svc=<ns/name>]            the Service is gone
func TestNewsTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/news", func(t *testing.T, path string) {
		epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		at := func(d *datadriven.TestData, key string) time.Time {
			var s string
			d.ScanArgs(t, key, &s)
			dur, err := time.ParseDuration(s)
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			return epoch.Add(dur)
		}
		var desk *NewsDesk
		stored := map[string][]metav1.Condition{}
		pools := map[string]string{}
		var types []string
		// services are the Services a command names: svc=, count=, or ns/web.
		services := func(d *datadriven.TestData) []string {
			if d.HasArg("count") {
				var n int
				d.ScanArgs(t, "count", &n)
				keys := make([]string, n)
				for i := range keys {
					keys[i] = fmt.Sprintf("ns/s-%02d", i)
				}
				return keys
			}
			key := "ns/web"
			if d.HasArg("svc") {
				d.ScanArgs(t, "svc", &key)
			}
			return []string{key}
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "start":
				after := time.Duration(0)
				if d.HasArg("after") {
					after = at(d, "after").Sub(epoch)
				}
				desk = NewNewsDesk(after, at(d, "at"))
				return fmt.Sprintf("news after %s\n", desk.after)
			case "stored":
				var c metav1.Condition
				for _, a := range d.CmdArgs {
					if !slices.Contains([]string{"svc", "count", "pool", "reason", "since"}, a.Key) {
						c.Type, c.Status = a.Key, metav1.ConditionStatus(a.Vals[0])
					}
				}
				c.LastTransitionTime = metav1.NewTime(at(d, "since"))
				if d.HasArg("reason") {
					d.ScanArgs(t, "reason", &c.Reason)
				}
				c.Message = strings.ToLower(c.Reason)
				for _, key := range services(d) {
					conds := stored[key]
					meta.RemoveStatusCondition(&conds, c.Type)
					stored[key] = append(conds, c)
					if d.HasArg("pool") {
						var pool string
						d.ScanArgs(t, "pool", &pool)
						pools[key] = pool
					}
				}
				if !slices.Contains(types, c.Type) {
					types = append(types, c.Type)
				}
				return "ok\n"
			case "review":
				now := at(d, "at")
				// Each line once, with how many Services said it when more than one did.
				var lines []string
				said := map[string]int{}
				say := func(format string, args ...any) {
					line := fmt.Sprintf(format, args...)
					if said[line]++; said[line] == 1 {
						lines = append(lines, line)
					}
				}
				many := d.HasArg("count")
				for _, key := range services(d) {
					n := desk.Review(key, pools[key], stored[key], types, now)
					for _, c := range n.Tell {
						who := ""
						if many || d.HasArg("svc") {
							who = key + " "
						}
						say("tell %s%s=%s %s", who, c.Type, c.Status, c.Reason)
					}
					for _, line := range newsLines(n) {
						say("%s", line)
					}
					switch {
					case n.Again > 0:
						say("look again at %s", now.Add(n.Again).Sub(epoch))
					case len(n.Tell) == 0 && len(n.Pool) == 0 && len(n.Pools) == 0:
						say("quiet")
					}
				}
				var b strings.Builder
				for _, line := range lines {
					if many && said[line] > 1 {
						fmt.Fprintf(&b, "%s (%d Services)\n", line, said[line])
					} else {
						fmt.Fprintf(&b, "%s\n", line)
					}
				}
				return b.String()
			case "shared":
				var pool string
				d.ScanArgs(t, "pool", &pool)
				shared, known := desk.Shared(pool)
				if !known {
					return "unknown: the status keeps what the leader before wrote\n"
				}
				c := SharedCondition(shared)
				return fmt.Sprintf("%s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
			case "hold":
				desk.Hold()
				return "ok\n"
			case "expect":
				if lines := newsLines(desk.Expect(services(d))); len(lines) > 0 {
					return strings.Join(lines, "\n") + "\n"
				}
				return "ok\n"
			case "forget":
				var b strings.Builder
				for _, key := range services(d) {
					delete(stored, key)
					for _, line := range newsLines(desk.Forget(key)) {
						b.WriteString(line + "\n")
					}
				}
				b.WriteString("ok\n")
				return b.String()
			}
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		})
	})
}

// newsLines are what a review tells on pools, and which pools' status changes.
func newsLines(n News) []string {
	var lines []string
	for _, p := range n.Pool {
		e := p.Notice()
		lines = append(lines, fmt.Sprintf("pool %s: %s %s: %s", p.Pool, e.Type, e.Reason, e.Note))
	}
	for _, p := range n.Pools {
		lines = append(lines, fmt.Sprintf("pool %s status changes", p))
	}
	if n.Known {
		lines = append(lines, "every pool's status may be written")
	}
	return lines
}

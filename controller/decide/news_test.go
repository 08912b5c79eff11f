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

// TestNewsTranscripts pins which health conditions become events, and when
// (testdata/news/*.txt). Commands:
//
//	start at=<d> [after=<d>]          a leader starts (times are offsets from a fixed epoch)
//	stored <Type>=<Status> [reason=<r>] since=<d>
//	                                  the Service's stored condition and its lastTransitionTime
//	review at=<d>                     what the desk tells, and when it looks again
//	forget                            the Service is gone
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
		var stored []metav1.Condition
		var types []string
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
				typ, status := d.CmdArgs[0].Key, d.CmdArgs[0].Vals[0]
				c := metav1.Condition{Type: typ, Status: metav1.ConditionStatus(status), LastTransitionTime: metav1.NewTime(at(d, "since"))}
				if d.HasArg("reason") {
					d.ScanArgs(t, "reason", &c.Reason)
				}
				meta.RemoveStatusCondition(&stored, typ)
				stored = append(stored, c)
				if !slices.Contains(types, typ) {
					types = append(types, typ)
				}
				return "ok\n"
			case "review":
				now := at(d, "at")
				tell, again := desk.Review("ns/web", stored, types, now)
				var b strings.Builder
				for _, c := range tell {
					fmt.Fprintf(&b, "tell %s=%s %s\n", c.Type, c.Status, c.Reason)
				}
				if again > 0 {
					fmt.Fprintf(&b, "look again at %s\n", now.Add(again).Sub(epoch))
				}
				if b.Len() == 0 {
					return "quiet\n"
				}
				return b.String()
			case "forget":
				desk.Forget("ns/web")
				return "ok\n"
			}
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		})
	})
}

package membership

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestAcceptTranscripts drives acceptHeartbeat through testdata/accept/*: "node" says the
// receiver's life and whether heartbeats are sealed, "sender" what it knows of the sender,
// "hear" a heartbeat (times in milliseconds); each answer is the verdict and what the receiver
// knows of the sender after it.
func TestAcceptTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/accept", func(t *testing.T, path string) {
		var (
			self   string
			sealed bool
			s      sender
			epoch  = time.Unix(1_700_000_000, 0)
		)
		ms := func(d *datadriven.TestData, key string) time.Time {
			var v int
			d.ScanArgs(t, key, &v)
			return epoch.Add(time.Duration(v) * time.Millisecond)
		}
		str := func(d *datadriven.TestData, key string) string {
			var v string
			if d.HasArg(key) {
				d.ScanArgs(t, key, &v)
			}
			return v
		}
		known := func() string {
			heard := "never"
			if !s.heard.IsZero() {
				heard = strconv.FormatInt(s.heard.Sub(epoch).Milliseconds(), 10) + "ms"
			}
			return fmt.Sprintf("sender: life %q, last number %d, heard %s", s.life, s.seq, heard)
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "node":
				self, sealed = str(d, "life"), d.HasArg("sealed")
			case "sender":
				s = sender{life: str(d, "life")}
				if d.HasArg("seq") {
					d.ScanArgs(t, "seq", &s.seq)
				}
				if d.HasArg("heard") {
					s.heard = ms(d, "heard")
				}
			case "hear":
				h := heartbeat{name: "b", life: str(d, "life"), direct: d.HasArg("direct"), to: str(d, "to"), at: ms(d, "at")}
				if d.HasArg("seq") {
					d.ScanArgs(t, "seq", &h.seq)
				}
				refused, after := acceptHeartbeat(h, s, self, sealed)
				s = after
				if refused != "" {
					return "refused: " + refused + "\n" + known()
				}
				return "taken\n" + known()
			default:
				t.Fatalf("unknown command %q", d.Cmd)
			}
			return known()
		})
	})
}

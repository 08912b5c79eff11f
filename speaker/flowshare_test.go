package speaker

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestFlowMessageTranscripts runs testdata/flowshare: the flow-sharing messages a node reads,
// and those it refuses. When a node shares, and the acks a round awaits, are the plan's
// (speaker/plan/testdata/flowshare).
func TestFlowMessageTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/flowshare", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "decode" {
				t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			}
			m, err := decodeFlowMessage([]byte(d.Input))
			if err != nil {
				return err.Error()
			}
			return fmt.Sprintf("%s round %d asked by %s, from %s: addrs %v members %v flows %v holder %q", m.Kind, m.Round, m.Asker, m.From, m.Addrs, m.Members, m.Flows, m.Holder)
		})
	})
}

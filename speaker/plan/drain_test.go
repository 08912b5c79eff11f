package plan_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/portico-lb/portico/speaker/plan"
	"github.com/portico-lb/portico/speaker/plan/plantest"
)

// TestDrainTranscripts runs testdata/drain/*.txt: since when a speaker counts each node
// cordoned (the drain grace's start). The L2 scenario language builds the nodes (nodes, cordon,
// uncordon, delete node, tick); cordoned reads them as one plan does and prints the stamps.
func TestDrainTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/drain", func(t *testing.T, path string) {
		s := plantest.NewL2Scenario()
		var since map[string]time.Time
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "cordoned" {
				if err := s.Run(d); err != nil {
					t.Fatalf("%s: %v", d.Pos, err)
				}
				return "ok"
			}
			since = plan.CordonedSince(since, s.World().Nodes, s.Clock)
			var out []string
			for _, n := range slices.Sorted(maps.Keys(since)) {
				out = append(out, fmt.Sprintf("%s since %s", n, since[n].Sub(plantest.ScenarioEpoch)))
			}
			if len(out) == 0 {
				return "none"
			}
			return strings.Join(out, "\n")
		})
	})
}

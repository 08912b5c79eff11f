package cpconfig_test

import (
	"encoding/json"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/portico-lb/portico/speaker/controlplane/cpconfig"
)

// TestParseTranscripts runs testdata/*.txt: each "parse" reads its input as a configuration
// file and prints the configuration, defaults filled, or every problem Parse names.
func TestParseTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "parse" {
				t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			}
			c, err := cpconfig.Parse([]byte(d.Input))
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			out, err := json.MarshalIndent(c, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			return string(out) + "\n"
		})
	})
}

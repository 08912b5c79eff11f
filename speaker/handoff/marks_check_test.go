package handoff_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/portico-lb/portico/speaker/handoff"
)

// TestMarkCheckTranscripts runs testdata/marks.txt: whether the hand-off may run beside the
// node's rules that use marks.
//
//	check mark=M slots=S   the hand-off's bits; the input lists the rules seen, one a line:
//	                       where they are, then the bits they use
func TestMarkCheckTranscripts(t *testing.T) {
	datadriven.RunTest(t, "testdata/marks.txt", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "check" {
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		}
		cfg := handoff.Defaults
		for _, arg := range d.CmdArgs {
			v, err := strconv.ParseUint(arg.Vals[0], 0, 32)
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			switch arg.Key {
			case "mark":
				cfg.Mark = uint32(v)
			case "slots":
				cfg.SlotMask = uint32(v)
			}
		}
		var uses []handoff.MarkUse
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			if line == "" {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			bits, err := strconv.ParseUint(line[i+1:], 0, 32)
			if err != nil {
				t.Fatalf("%s: %q: %v", d.Pos, line, err)
			}
			uses = append(uses, handoff.MarkUse{Where: line[:i], Bits: uint32(bits)})
		}
		c := cfg.CheckMarks(uses)
		return fmt.Sprintf("hand-off %v, by flow %v, free %#08x\n%s\n", c.Handoff, c.Flows, c.Free, c.Message(cfg))
	})
}

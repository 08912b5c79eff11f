package e2e

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestSpeakerWithoutForwardGuard: with the forwarding guard and the L2 hand-off off (the chart's
// speaker.forwardGuard=false, config/no-forward-guard), the speaker holds NET_RAW alone and
// still announces: NET_ADMIN is theirs and nothing else's, so dropping it costs only them
// (docs/speaker-l2.md).
func TestSpeakerWithoutForwardGuard(t *testing.T) {
	inLab(t, func(t *testing.T, e *l2Env) {
		e.Security.Capabilities = slices.DeleteFunc(slices.Clone(e.Security.Capabilities), func(c string) bool { return c == "NET_ADMIN" })
		if !slices.Equal(e.Security.Capabilities, []string{"NET_RAW"}) {
			t.Fatalf("capabilities without NET_ADMIN: %v, want [NET_RAW]", e.Security.Capabilities)
		}
		e.restartSpeakers([]string{"--forward-guard=false", "--l2-handoff-grace=0s"})
		for _, n := range e.Nodes {
			e.Security.checkProcess(t, e.speakers[n.Name].cmd.Process.Pid, e.Speaker)
		}
		ip := netip.MustParseAddr("198.51.100.210")
		e.create(scenario{name: "no-guard", ip: ip})
		e.expectOwner(ip, hashOwner(ip, "node-a", "node-b", "node-c"))
		for _, n := range e.Nodes {
			if log := e.speakerLog(n.Name); strings.Contains(log, "no forwarding guard") || strings.Contains(log, "no L2 hand-off") {
				t.Errorf("%s's speaker tried the guard or the hand-off although they are off", n.Name)
			}
		}
	})
}

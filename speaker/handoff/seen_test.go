package handoff_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/portico-lb/portico/internal/netlab"
	"github.com/portico-lb/portico/speaker/handoff"
)

// TestSeenMarks reads a node's rules with each CNI's marks applied as that CNI applies them
// (iptables-nft's rules, an nftables table, a policy-routing rule): the bits each chain uses are
// found, the default bits are free beside Calico and Cilium, Istio's ambient mode takes the
// slots (the hand-off by address only), and a rule setting the hand-off bit stops it.
func TestSeenMarks(t *testing.T) {
	netlab.Require(t, "nft", "iptables")
	l := netlab.New(t)
	node := l.AddHost("node", "02:00:00:00:00:0a", "10.0.0.11/24", "2001:db8::11/64")
	sh := func(script string) {
		t.Helper()
		if out, err := exec.Command("ip", "netns", "exec", node.NS, "sh", "-ec", script).CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	check := func() (handoff.MarkCheck, []handoff.MarkUse) {
		t.Helper()
		var uses []handoff.MarkUse
		in(t, node.NS, func() (err error) { uses, err = handoff.Defaults.SeenMarks(handoff.TableName); return err })
		return handoff.Defaults.CheckMarks(uses), uses
	}
	want := map[string]struct {
		handoff, flows bool
		seen           []string // "where bits", among those seen
	}{
		"calico": {true, true, []string{"table ip raw chain cali-PREROUTING 0xf0000", "table ip mangle chain cali-PREROUTING 0xfff10000",
			"table ip filter chain cali-FORWARD 0xf0000"}},
		"cilium": {true, true, []string{"table ip cilium-bpf-standin chain from-container 0xa5b0f00",
			"table ip mangle chain CILIUM_PRE_mangle 0xe00", "ip rule ipv4 pref 9 fwmark 0x200/0xf00 lookup 2004 0xf00"}},
		"istio": {true, false, []string{"table ip mangle chain ISTIO_PRERT 0xfff"}},
	}
	for _, cni := range netlab.CNIMarks {
		t.Run(cni.Name, func(t *testing.T) {
			sh(cni.Set)
			defer sh(cni.Unset)
			c, uses := check()
			var seen []string
			for _, u := range uses {
				seen = append(seen, u.Where+" "+hex(u.Bits))
			}
			w := want[cni.Name]
			for _, s := range w.seen {
				if !strings.Contains(strings.Join(seen, "\n"), s) {
					t.Errorf("%s not seen among\n%s", s, strings.Join(seen, "\n"))
				}
			}
			if c.Handoff != w.handoff || c.Flows != w.flows {
				t.Errorf("hand-off %v, by flow %v; want %v, %v: %s", c.Handoff, c.Flows, w.handoff, w.flows, c.Message(handoff.Defaults))
			}
		})
	}
	t.Run("the hand-off bit set by another rule", func(t *testing.T) {
		sh(`nft add table ip other; nft 'add chain ip other pre { type filter hook prerouting priority mangle; }'; nft add rule ip other pre meta mark set meta mark or 0x2000`)
		if c, _ := check(); c.Handoff || !strings.Contains(c.Message(handoff.Defaults), "table ip other chain pre (0x2000)") {
			t.Errorf("hand-off %v: %s", c.Handoff, c.Message(handoff.Defaults))
		}
	})
}

func hex(b uint32) string { return fmt.Sprintf("%#x", b) }

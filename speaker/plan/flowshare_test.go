package plan_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/plan"
)

// TestFlowShareTranscripts runs testdata/flowshare: when a node shares its flows (standing, routed
// addresses before and after; a stop), the acks a round awaits, the hand-off slots it gives
// back and the node address flows are handed to.
func TestFlowShareTranscripts(t *testing.T) {
	standings := map[string]rules.BGPStanding{"advertise": rules.BGPAdvertise, "graceful-shutdown": rules.BGPGracefulShutdown,
		"withdraw": rules.BGPWithdraw, "unknown": plan.UnknownStanding}
	datadriven.Walk(t, "testdata/flowshare", func(t *testing.T, path string) {
		var r *plan.ShareRound
		awaiting := func() string {
			if r.Done() {
				return "done"
			}
			return "awaiting " + strings.Join(r.Missing(), " ")
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			arg := func(key string) []string {
				for _, a := range d.CmdArgs {
					if a.Key == key {
						return strings.FieldsFunc(strings.Join(a.Vals, ","), func(r rune) bool { return r == ',' })
					}
				}
				return nil
			}
			switch d.Cmd {
			case "share":
				before, after := standings[strings.Join(arg("before"), "")], standings[strings.Join(arg("after"), "")]
				return fmt.Sprint(plan.FlowsToShare(before, after, routed(arg("routed-before")), routed(arg("routed-after"))))
			case "stop":
				peers := map[string]plan.Peer{}
				for i, p := range arg("peers") {
					peers[fmt.Sprint(i)] = plan.Peer{GracefulRestart: p == "gr"}
				}
				return fmt.Sprint(plan.StopShares(strings.Join(arg("keep"), "") == "true", peers))
			case "round":
				r = plan.NewShareRound(arg("members"))
				return awaiting()
			case "ack":
				r.Acked(strings.Join(arg("receiver"), ""), strings.Join(arg("holder"), ""))
				return awaiting()
			case "drop":
				r.Drop(strings.Join(arg("member"), ""))
				return awaiting()
			case "stale":
				slots := map[int]netip.Addr{}
				for i, via := range arg("slots") {
					slots[i+1] = netip.MustParseAddr(via)
				}
				var nodes []corev1.Node
				for _, n := range arg("nodes") {
					name, ip, _ := strings.Cut(n, "=")
					nodes = append(nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
						Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}})
				}
				return fmt.Sprint(plan.StaleSlots(slots, nodes))
			case "via":
				var ips []netip.Addr
				for _, s := range arg("ips") {
					ips = append(ips, netip.MustParseAddr(s))
				}
				var subnets []netip.Prefix
				for _, s := range arg("subnets") {
					subnets = append(subnets, netip.MustParsePrefix(s))
				}
				via, ok := plan.NodeAddressFor(netip.MustParseAddr(strings.Join(arg("ip"), "")), ips, subnets)
				if !ok {
					return "none"
				}
				return via.String()
			}
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		})
	})
}

func routed(addrs []string) map[netip.Addr]plan.BGPClaim {
	out := map[netip.Addr]plan.BGPClaim{}
	for _, s := range addrs {
		out[netip.MustParseAddr(s)] = plan.BGPClaim{}
	}
	return out
}

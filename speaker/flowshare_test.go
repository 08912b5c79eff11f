package speaker

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

// TestFlowShareTranscripts runs testdata/flowshare: when a node shares (standing, routed
// addresses before and after; a stop), the acks a round awaits, the messages it refuses, and the
// hand-off slots it gives back.
func TestFlowShareTranscripts(t *testing.T) {
	standings := map[string]rules.BGPStanding{"advertise": rules.BGPAdvertise, "graceful-shutdown": rules.BGPGracefulShutdown,
		"withdraw": rules.BGPWithdraw, "unknown": unknownStanding}
	datadriven.Walk(t, "testdata/flowshare", func(t *testing.T, path string) {
		var r *shareRound
		awaiting := func() string {
			select {
			case <-r.done:
				return "done"
			default:
				return "awaiting " + strings.Join(r.missing(), " ")
			}
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			arg := func(key string) string {
				for _, a := range d.CmdArgs {
					if a.Key == key {
						return strings.Join(a.Vals, ",")
					}
				}
				return ""
			}
			routed := func(key string) map[netip.Addr]plan.BGPClaim {
				out := map[netip.Addr]plan.BGPClaim{}
				for _, s := range strings.FieldsFunc(arg(key), func(r rune) bool { return r == ',' }) {
					out[netip.MustParseAddr(s)] = plan.BGPClaim{}
				}
				return out
			}
			switch d.Cmd {
			case "share":
				addrs := flowsToShare(standings[arg("before")], standings[arg("after")], routed("routed-before"), routed("routed-after"))
				return fmt.Sprint(addrs)
			case "stop":
				peers := map[string]plan.Peer{}
				for i, p := range strings.FieldsFunc(arg("peers"), func(r rune) bool { return r == ',' }) {
					peers[fmt.Sprint(i)] = plan.Peer{GracefulRestart: p == "gr"}
				}
				return fmt.Sprint(stopShares(arg("keep") == "true", peers))
			case "round":
				r = newShareRound(strings.Split(arg("members"), ","))
				return awaiting()
			case "ack":
				r.acked(arg("receiver"), arg("holder"))
				return awaiting()
			case "drop":
				r.drop(arg("member"))
				return awaiting()
			case "stale":
				slots := map[int]netip.Addr{}
				for i, via := range strings.FieldsFunc(arg("slots"), func(r rune) bool { return r == ',' }) {
					slots[i+1] = netip.MustParseAddr(via)
				}
				var nodes []corev1.Node
				for _, n := range strings.FieldsFunc(arg("nodes"), func(r rune) bool { return r == ',' }) {
					name, ip, _ := strings.Cut(n, "=")
					nodes = append(nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
						Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}})
				}
				return fmt.Sprint(staleSlots(slots, nodes))
			case "decode":
				m, err := decodeFlowMessage([]byte(d.Input))
				if err != nil {
					return err.Error()
				}
				return fmt.Sprintf("%s round %d asked by %s, from %s: addrs %v members %v flows %v holder %q", m.Kind, m.Round, m.Asker, m.From, m.Addrs, m.Members, m.Flows, m.Holder)
			}
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		})
	})
}

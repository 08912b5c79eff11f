package decide

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// TestAdvertisementTranscripts tells, in testdata/advertisements/*.txt, the Ready condition the
// advertisement reconciler decides, the write and the event. Commands:
//
//	pool <name>...                          IPAddressPools
//	node <name> [<k>=<v>]                   a Node with a label
//	peer <name>...                          BGPPeers
//	l2 <name> [pools=<p>,...] [nodes=<k>=<v>] [selector=<bad>]   an L2Advertisement, decided
//	bgp <name> [pools=<p>,...] [peers=<p>,...]                   a BGPAdvertisement, decided
func TestAdvertisementTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/advertisements", func(t *testing.T, path string) {
		refs := References{Peers: map[string]bool{}}
		stored := map[string][]metav1.Condition{}
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			arg := func(key string) []string {
				var v string
				if d.HasArg(key) {
					d.ScanArgs(t, key, &v)
					return strings.Split(v, ",")
				}
				return nil
			}
			names := func() []porticov1.Name {
				var n []porticov1.Name
				for _, p := range arg("pools") {
					n = append(n, porticov1.Name(p))
				}
				return n
			}
			var a Advertised
			switch d.Cmd {
			case "pool":
				for _, c := range d.CmdArgs {
					refs.Pools = append(refs.Pools, porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: c.Key}})
				}
				return "ok\n"
			case "node":
				n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: d.CmdArgs[0].Key, Labels: map[string]string{}}}
				for _, c := range d.CmdArgs[1:] {
					n.Labels[c.Key] = c.Vals[0]
				}
				refs.Nodes = append(refs.Nodes, n)
				return "ok\n"
			case "peer":
				for _, c := range d.CmdArgs {
					refs.Peers[c.Key] = true
				}
				return "ok\n"
			case "l2":
				ad := &porticov1.L2Advertisement{Spec: porticov1.L2AdvertisementSpec{IPAddressPools: names()}}
				if sel := arg("nodes"); sel != nil {
					k, v, _ := strings.Cut(sel[0], "=")
					ad.Spec.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{k: v}}}
				}
				if sel := arg("selector"); sel != nil {
					ad.Spec.ServiceSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"app": sel[0]}}}
				}
				a = L2Advertised(ad)
			case "bgp":
				ad := &porticov1.BGPAdvertisement{Spec: porticov1.BGPAdvertisementSpec{IPAddressPools: names()}}
				for _, p := range arg("peers") {
					ad.Spec.Peers = append(ad.Spec.Peers, porticov1.Name(p))
				}
				a = BGPAdvertised(ad)
			default:
				t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			}
			name := d.Cmd + "/" + d.CmdArgs[0].Key
			rd := SetCondition(stored[name], 1, AdvertisementReady(refs, a), now)
			if rd.Conditions == nil {
				return "no write\n"
			}
			stored[name] = rd.Conditions
			var b strings.Builder
			for _, c := range rd.Conditions {
				fmt.Fprintln(&b, condLine(c))
			}
			for _, n := range rd.Tell {
				fmt.Fprintf(&b, "event %s %s %s: %s\n", n.Type, n.Reason, n.Action, n.Note)
			}
			return b.String()
		})
	})
}

// TestPeerTranscripts tells, in testdata/peers/*.txt, the status a BGPPeer gets from the
// sessions the speakers report. Commands:
//
//	session <node> <peer> <state> [reason=R]   a speaker's report of its session with a peer
//	peer <name>                     the peer's status, decided and stored
func TestPeerTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/peers", func(t *testing.T, path string) {
		var speakers []porticov1.Speaker
		peers := map[string]*porticov1.BGPPeer{}
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "session":
				node, peer, state := d.CmdArgs[0].Key, d.CmdArgs[1].Key, d.CmdArgs[2].Key
				i := len(speakers)
				for j := range speakers {
					if speakers[j].Name == node {
						i = j
					}
				}
				if i == len(speakers) {
					speakers = append(speakers, porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: node}})
				}
				s := &speakers[i].Status
				ps := porticov1.PeerSession{Peer: peer, State: state}
				if d.HasArg("reason") {
					d.ScanArgs(t, "reason", &ps.Reason)
				}
				if d.HasArg("nobfd") { // nobfd=REASON: the node cannot apply the peer's bfdProfile
					d.ScanArgs(t, "nobfd", &ps.BFDReason)
					ps.BFDMessage = "bfdProfile says " + ps.BFDReason
				}
				s.Sessions = append(s.Sessions, ps)
				return "ok\n"
			case "peer":
				name := d.CmdArgs[0].Key
				if peers[name] == nil {
					peers[name] = &porticov1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1}}
				}
				if d.HasArg("bfd") {
					var profile string
					d.ScanArgs(t, "bfd", &profile)
					peers[name].Spec.BFDProfile = porticov1.Name(profile)
				}
				st, writes := Peer(peers[name], speakers, now)
				if !writes {
					return "no write\n"
				}
				peers[name].Status = st
				var b strings.Builder
				for _, s := range st.Sessions {
					fmt.Fprintf(&b, "session %s %s%s\n", s.Node, s.State, strings.TrimRight(" "+s.Reason, " "))
				}
				for _, c := range st.Conditions {
					fmt.Fprintln(&b, condLine(c))
				}
				return b.String()
			}
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		})
	})
}

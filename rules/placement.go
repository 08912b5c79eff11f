package rules

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules/election"
)

// An L2 address stays with the node answering for it (L2Owner, election.Sticky), so a node that
// rejoins takes nothing back; the balance (election.Balance, held back by L2Rollout) moves
// addresses back to the hash's choice one at a time, once the cluster has settled. Only the
// speakers act on the balance: the controller and explain name an address's owner while it
// is held, and a move is over once the new owner holds it.

// DefaultL2BalanceSettle is how long every speaker must have been running and every address
// held where it is before one address moves for balance (the speakers' --l2-balance-settle):
// long beside a speaker's restart in a rolling update (so none moves in between), short beside
// how long an imbalance is worth living with.
const DefaultL2BalanceSettle = 60 * time.Second

// Holders are, by address, the nodes whose Speaker status lists it over L2, and since when.
type Holders map[netip.Addr][]election.Holder

// HoldersOf reads the holders from the Speakers. An entry without since (written by a speaker
// older than the field) holds since the zero time: the oldest claim, which any takeover beats.
func HoldersOf(speakers []v1alpha1.Speaker) Holders {
	out := Holders{}
	for i := range speakers {
		for _, a := range speakers[i].Status.Announcements {
			ip, err := netip.ParseAddr(a.IP)
			if a.Protocol != v1alpha1.ProtocolL2 || err != nil {
				continue
			}
			ip = ip.Unmap()
			h := election.Holder{Node: speakers[i].Name}
			if a.Since != nil {
				h.Since = a.Since.Time
			}
			// Services sharing an address each have an entry: one holder per node.
			if !slices.ContainsFunc(out[ip], func(o election.Holder) bool { return o.Node == h.Node }) {
				out[ip] = append(out[ip], h)
			}
		}
	}
	return out
}

// L2Rollout says why no address moves for balance now (election.Balance), "" when one may: a node running a speaker
// (speakers: the nodes with a Speaker) is cordoned, as a drain begins, or is Ready while its
// speaker is not alive, as during a restart. A node that is not Ready is down, not rolling:
// it holds nothing back.
func L2Rollout(nodes []corev1.Node, speakers []string, alive func(string) bool) string {
	var cordoned, restarting []string
	for i := range nodes {
		n := &nodes[i]
		if !slices.Contains(speakers, n.Name) {
			continue
		}
		switch h := FitnessOf(n); {
		case h.Cordoned:
			cordoned = append(cordoned, n.Name)
		case !h.NotReady && !h.OutOfService && !alive(n.Name):
			restarting = append(restarting, n.Name)
		}
	}
	var parts []string
	if len(cordoned) > 0 {
		parts = append(parts, "cordoned: "+strings.Join(cordoned, ","))
	}
	if len(restarting) > 0 {
		parts = append(parts, "speaker not alive on a Ready node: "+strings.Join(restarting, ","))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("a rollout is under way (%s)", strings.Join(parts, "; "))
}

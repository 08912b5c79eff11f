// Package status is `kubectl portico status`: the pools with their usage, the addresses
// foreign hosts use and those held for deleted Services, the speakers, and their BGP sessions.
package status

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/plugin"
)

// Command is the status subcommand.
func Command(env func(*cobra.Command) (*plugin.Env, error)) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Pools (assigned, available, waiting), speakers and BGP sessions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := env(cmd)
			if err != nil {
				return err
			}
			return Run(cmd.Context(), e)
		},
	}
}

// Run prints the status.
func Run(ctx context.Context, e *plugin.Env) error {
	var pools porticov1.IPAddressPoolList
	if err := e.Client.List(ctx, &pools); err != nil {
		return err
	}
	var speakers porticov1.SpeakerList
	if err := e.Client.List(ctx, &speakers); err != nil {
		return err
	}
	fmt.Fprintln(e.Out, "POOLS")
	tw := plugin.Table(e.Out, "NAME", "ADDRESSES", "ASSIGNED", "AVAILABLE", "WAITING", "USAGE", "PROBLEMS")
	for _, p := range pools.Items {
		addrs := make([]string, len(p.Spec.Addresses))
		for i, a := range p.Spec.Addresses {
			addrs[i] = string(a)
		}
		plugin.Row(tw, p.Name, strings.Join(addrs, ","), p.Status.Assigned, p.Status.Available, p.Status.Waiting,
			plugin.UsageBar(p.Status.Assigned, p.Status.Available, 20), poolProblems(&p))
	}
	if len(pools.Items) == 0 {
		plugin.Row(tw, "(none: no Service can get an address)")
	}
	tw.Flush()
	printInUse(e, pools.Items)
	printHolds(e, pools.Items)

	fmt.Fprintln(e.Out, "\nSPEAKERS")
	tw = plugin.Table(e.Out, "NODE", "READY", "L2", "BGP-PEERS-UP", "SELF-CHECKS", "PROBLEMS")
	sessions := 0
	for _, s := range speakers.Items {
		ready := "Unknown"
		if c := meta.FindStatusCondition(s.Status.Conditions, porticov1.ConditionReady); c != nil {
			ready = string(c.Status)
		}
		plugin.Row(tw, s.Name, ready, s.Status.L2Announcements, s.Status.BGPPeersUp, len(s.Status.SelfChecks), speakerProblems(&s))
		sessions += len(s.Status.Sessions)
	}
	if len(speakers.Items) == 0 {
		plugin.Row(tw, "(none: no speaker has reported; nothing is announced)")
	}
	tw.Flush()

	printHandoffs(e, speakers.Items)
	printFlowShares(e, speakers.Items)

	if sessions == 0 {
		return nil
	}
	fmt.Fprintln(e.Out, "\nBGP SESSIONS")
	tw = plugin.Table(e.Out, "NODE", "PEER", "STATE", "MESSAGE")
	for _, s := range speakers.Items {
		for _, ps := range s.Status.Sessions {
			plugin.Row(tw, s.Name, ps.Peer, ps.State, ps.Message)
		}
	}
	return tw.Flush()
}

// speakerProblems are the Speaker's configErrors and its conditions other than Ready that are
// False (DataPath, HandoffMarks, StrictARP: what the node lacks), so that a speaker running
// without part of its packet path does not show as having no problem.
func speakerProblems(s *porticov1.Speaker) string {
	out := slices.Clone(s.Status.ConfigErrors)
	for _, c := range s.Status.Conditions {
		if c.Type != porticov1.ConditionReady && c.Status == metav1.ConditionFalse {
			out = append(out, c.Type+" "+c.Reason+": "+c.Message)
		}
	}
	return strings.Join(out, "; ")
}

// poolProblems names the pool's conditions that are not as they should be.
func poolProblems(p *porticov1.IPAddressPool) string {
	var out []string
	for _, c := range p.Status.Conditions {
		bad := (c.Type == porticov1.ConditionReady && c.Status != "True") || (c.Type != porticov1.ConditionReady && c.Status == "True")
		if bad {
			out = append(out, c.Type+": "+c.Message)
		}
	}
	return strings.Join(out, "; ")
}

// printInUse lists, per pool, the free addresses a foreign host answered for (they are not
// handed out while it does), then the proxy answerers (whose answers hold nothing back).
func printInUse(e *plugin.Env, pools []porticov1.IPAddressPool) {
	var inUse, proxies [][]any
	for _, p := range pools {
		for _, u := range p.Status.InUse {
			inUse = append(inUse, []any{p.Name, u.Address, u.MAC, u.SeenBy, u.Since.UTC().Format(time.RFC3339)})
		}
		for _, x := range p.Status.ProxyAnswerers {
			proxies = append(proxies, []any{p.Name, x.MAC, x.Addresses, x.SeenBy, x.Since.UTC().Format(time.RFC3339)})
		}
	}
	printSection(e, "ADDRESSES IN USE BY FOREIGN HOSTS (not handed out while they answer)", inUse, "POOL", "ADDRESS", "MAC", "SEEN-BY", "SINCE")
	printSection(e, "PROXY ANSWERERS (a MAC answering for many addresses: proxy ARP/NDP, ignored, holds nothing back)", proxies,
		"POOL", "MAC", "ADDRESSES", "SEEN-BY", "SINCE")
}

// printHolds lists, per pool, the addresses kept for deleted Services (spec.addressHold): nobody
// else gets them until the hold ends, except a Service of the same namespace asking for one.
func printHolds(e *plugin.Env, pools []porticov1.IPAddressPool) {
	var rows [][]any
	for _, p := range pools {
		for _, h := range p.Status.Holds {
			key := h.SharingKey
			if key == "" {
				key = "-"
			}
			rows = append(rows, []any{p.Name, h.Address, h.Namespace + "/" + h.Name, key, h.Until.UTC().Format(time.RFC3339)})
		}
	}
	printSection(e, "ADDRESSES HELD FOR DELETED SERVICES (given back to the Service created again under its name; to nobody else until the hold ends)", rows,
		"POOL", "ADDRESS", "SERVICE", "SHARING-KEY", "UNTIL")
}

// printHandoffs lists the addresses each node took over from a node that stayed up, whose
// connections it passes on to that node (docs/speaker-l2.md, "What survives which move").
func printHandoffs(e *plugin.Env, speakers []porticov1.Speaker) {
	var rows [][]any
	for _, s := range speakers {
		for _, h := range s.Status.Handoffs {
			until := "over"
			if h.PickupUntil != nil {
				until = h.PickupUntil.UTC().Format(time.RFC3339)
			}
			from := h.Node
			if from == "" {
				from = "-"
			}
			rows = append(rows, []any{s.Name, h.IP, from, h.Via, until})
		}
	}
	printSection(e, "L2 HAND-OFFS (connections opened through the previous owner, passed on to it)", rows,
		"NODE", "ADDRESS", "FROM", "VIA", "PICKUP-UNTIL")
}

// printFlowShares lists the latest round each node asked the members to share their flows in,
// before changing its place in its BGP addresses' ECMP sets (docs/speaker-bgp.md, "What
// survives which move").
func printFlowShares(e *plugin.Env, speakers []porticov1.Speaker) {
	var rows [][]any
	for _, s := range speakers {
		f := s.Status.FlowShare
		if f == nil {
			continue
		}
		result, missing := "complete", "-"
		if !f.Complete {
			result = "incomplete"
		}
		if len(f.Missing) > 0 {
			missing = strings.Join(f.Missing, ",")
		}
		rows = append(rows, []any{s.Name, f.At.UTC().Format(time.RFC3339), f.Reason, f.Members, result, f.Took.Duration, missing})
	}
	printSection(e, "BGP FLOW SHARING (the latest round each node asked for before its routes changed)", rows,
		"NODE", "AT", "REASON", "MEMBERS", "RESULT", "TOOK", "MISSING")
}

// printSection prints a titled table of rows, or nothing when there are none.
func printSection(e *plugin.Env, title string, rows [][]any, header ...string) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(e.Out, "\n"+title)
	tw := plugin.Table(e.Out, header...)
	for _, r := range rows {
		plugin.Row(tw, r...)
	}
	tw.Flush()
}

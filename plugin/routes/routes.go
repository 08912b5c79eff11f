// Package routes is `kubectl portico routes`: per node and BGP peer, what is advertised and
// with which next hop, local-pref and communities, as the speakers report it in their Speaker
// status (like `cilium bgp routes`). Each route to a peer is reported once, by the first node
// by name that sends it there, so that one Service change rewrites one Speaker.
package routes

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/plugin"
)

// Command is the routes subcommand.
func Command(env func(*cobra.Command) (*plugin.Env, error)) *cobra.Command {
	var node string
	cmd := &cobra.Command{
		Use:   "routes [--node NODE]",
		Short: "BGP routes each node advertises to each peer, with next hop, local-pref and communities",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := env(cmd)
			if err != nil {
				return err
			}
			return Run(cmd.Context(), e, node)
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "only this node's routes")
	return cmd
}

// Run prints the routes of every node (or of node only).
func Run(ctx context.Context, e *plugin.Env, node string) error {
	var speakers porticov1.SpeakerList
	if err := e.Client.List(ctx, &speakers); err != nil {
		return err
	}
	tw := plugin.Table(e.Out, "NODE", "PEER", "ADDRESS", "MY-AS", "PEER-AS", "PREFIX", "NEXT-HOP", "LOCAL-PREF", "COMMUNITIES")
	var notes []string
	rows, unlisted := 0, false
	for _, s := range speakers.Items {
		b := s.Status.BGP
		if (node != "" && s.Name != node) || b == nil {
			continue
		}
		for _, p := range b.Peers {
			peerAS := asn(p.PeerASN)
			if p.PeerASN == 0 {
				peerAS = "(not learned yet)"
			}
			n := 0
			for _, r := range b.Routes {
				if !slices.Contains(r.Peers, p.Peer) {
					continue
				}
				plugin.Row(tw, s.Name, p.Peer, p.Address, asn(p.MyASN), peerAS, r.Prefix, r.NextHop, asn(r.LocalPref), strings.Join(r.Communities, ","))
				n++
			}
			if n == 0 {
				plugin.Row(tw, s.Name, p.Peer, p.Address, asn(p.MyASN), peerAS, "(none listed by this node)")
				unlisted = true
			}
			rows++
		}
		if b.OmittedRoutes > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d more routes not listed (its status lists %d)", s.Name, b.OmittedRoutes, porticov1.MaxBGPRoutes))
		}
	}
	if rows == 0 {
		plugin.Row(tw, "(no BGP session reported"+onNode(node)+")")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if unlisted {
		notes = append(notes, "A route to a peer is listed by one node, the first by name that sends it there; other nodes with a session to that peer that advertise the Service send it too, from their own address.")
	}
	for _, n := range notes {
		fmt.Fprintln(e.Out, n)
	}
	return nil
}

func asn(v uint32) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprint(v)
}

func onNode(node string) string {
	if node == "" {
		return ""
	}
	return " by node " + node
}

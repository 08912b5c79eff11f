package rules

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"iter"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// RouterIDSource says where a node's BGP router ID comes from.
type RouterIDSource string

const (
	// RouterIDFromLabel: the node's portico.dev/bgp-router-id label.
	RouterIDFromLabel RouterIDSource = "label"
	// RouterIDFromInternalIP: the node's lowest IPv4 InternalIP (the default since the first
	// release, so an IPv4 or dual-stack node keeps the ID it always had).
	RouterIDFromInternalIP RouterIDSource = "InternalIP"
	// RouterIDDerived: derived from the node's name, for a node with neither.
	RouterIDDerived RouterIDSource = "derived"
)

// RouterID is the BGP router ID chosen for one node. Problem says why it is not the one the
// node asked for (a label that is no IPv4 address, an ID an older node holds); empty when it is.
type RouterID struct {
	ID      netip.Addr
	Source  RouterIDSource
	Problem string
}

// RouterIDs chooses every node's BGP router ID, so that no two nodes of the cluster share one
// (an IPv6-only cluster would otherwise have none to give, or one for all). The nodes are taken
// oldest first (creationTimestamp, which has whole seconds, then name byte by byte: node-10
// before node-9); each takes, of these, the first that is valid and that no older node took:
//
//  1. its portico.dev/bgp-router-id label, a dotted-quad IPv4 address;
//  2. its lowest IPv4 InternalIP;
//  3. an ID derived from its name: the FNV-1a hash of the name (then of "name#1", "name#2",
//     ...) read as an IPv4 address, skipping 0.0.0.0/8, 127.0.0.0/8 and 224.0.0.0/3, which
//     routers refuse as identifiers.
//
// A node's ID then only changes when its own label or addresses change, or when an older node
// comes to claim the same ID. Every node computes the same table from the same Nodes.
func RouterIDs(nodes []corev1.Node) map[string]RouterID {
	order := make([]*corev1.Node, len(nodes))
	for i := range nodes {
		order[i] = &nodes[i]
	}
	slices.SortFunc(order, func(a, b *corev1.Node) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	taken := map[netip.Addr]string{} // ID → the node holding it
	out := make(map[string]RouterID, len(nodes))
	for _, n := range order {
		id := chooseRouterID(n, taken)
		taken[id.ID] = n.Name
		out[n.Name] = id
	}
	return out
}

// chooseRouterID is node n's ID given the IDs older nodes hold.
func chooseRouterID(n *corev1.Node, taken map[netip.Addr]string) RouterID {
	var problems []string
	if v, ok := n.Labels[v1alpha1.LabelBGPRouterID]; ok {
		switch id, err := labelRouterID(v); {
		case err != nil:
			problems = append(problems, fmt.Sprintf("node label %s=%q %v", v1alpha1.LabelBGPRouterID, v, err))
		case taken[id] != "":
			problems = append(problems, fmt.Sprintf("node label %s=%s is %s's router ID already", v1alpha1.LabelBGPRouterID, v, taken[id]))
		default:
			return RouterID{ID: id, Source: RouterIDFromLabel}
		}
	}
	if id := LowestOfFamily(slices.Values(InternalIPs(n)), true); id.IsValid() {
		if taken[id] == "" {
			return RouterID{ID: id, Source: RouterIDFromInternalIP, Problem: usingInstead(problems, id, RouterIDFromInternalIP)}
		}
		problems = append(problems, fmt.Sprintf("InternalIP %s is %s's router ID already", id, taken[id]))
	}
	id := derivedRouterID(n.Name, taken)
	return RouterID{ID: id, Source: RouterIDDerived, Problem: usingInstead(problems, id, RouterIDDerived)}
}

// labelRouterID parses a router ID label: a dotted quad, not 0.0.0.0 (RFC 6286).
func labelRouterID(v string) (netip.Addr, error) {
	id, err := netip.ParseAddr(v)
	switch {
	case err != nil || !id.Is4():
		return netip.Addr{}, fmt.Errorf("is not an IPv4 address in dotted-quad form (such as 10.255.0.11)")
	case id.IsUnspecified():
		return netip.Addr{}, fmt.Errorf("is 0.0.0.0, which BGP does not allow as a router ID")
	}
	return id, nil
}

// derivedRouterID hashes name (then name#1, name#2, ...) until the result is an identifier
// routers take that no older node holds.
func derivedRouterID(name string, taken map[netip.Addr]string) netip.Addr {
	for i := 0; ; i++ {
		h := fnv.New32a()
		h.Write([]byte(name))
		if i > 0 {
			h.Write([]byte("#" + strconv.Itoa(i)))
		}
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], h.Sum32())
		id := netip.AddrFrom4(b)
		if first := b[0]; first != 0 && first != 127 && first < 224 && taken[id] == "" {
			return id
		}
	}
}

// LowestOfFamily is the lowest of addrs of one family (IPv4 when v4), or the zero Addr: a
// node's router ID, and the next hop it gives for its routes.
func LowestOfFamily(addrs iter.Seq[netip.Addr], v4 bool) netip.Addr {
	var best netip.Addr
	for a := range addrs {
		if a.Is4() == v4 && (!best.IsValid() || a.Less(best)) {
			best = a
		}
	}
	return best
}

// usingInstead says what is wrong and which ID the node uses instead; empty with nothing wrong.
func usingInstead(problems []string, id netip.Addr, source RouterIDSource) string {
	if len(problems) == 0 {
		return ""
	}
	how := map[RouterIDSource]string{RouterIDFromInternalIP: "its IPv4 InternalIP", RouterIDDerived: "derived from the node's name"}[source]
	return fmt.Sprintf("BGP router ID: %s; using %s (%s) instead", strings.Join(problems, "; "), id, how)
}

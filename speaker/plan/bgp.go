package plan

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
)

// BGPClaim is one address this node advertises over BGP.
type BGPClaim struct {
	Services []string // namespace/name, sorted: several when Services share the address
	Peers    []string // BGPPeer names, sorted
	// Teller: this node tells the address's Services (an Announced event and its Speaker
	// status): every advertising node advertises the same, so one of them speaks for all.
	Teller bool
	// FirstTo are the peers of Peers no live node before this one by name sends the address
	// to: this node's status.bgp lists the address's routes to them, so each route to each
	// peer is listed by one node (all of Peers for the teller).
	FirstTo []string
}

// BGP session defaults (BGPPeer's documented defaults).
const (
	defaultBGPPort     = 179
	defaultHoldTime    = 90 * time.Second
	defaultConnectTime = 5 * time.Second
)

// bgpNode is what the BGP plan needs of one node: the sessions it holds (BGPPeers whose
// nodeSelectors match it) and its InternalIPs (router ID and next hops). Unlike L2 there is no
// owner: every selected node advertises (ECMP at the router), except that
// externalTrafficPolicy Local needs a ready endpoint on the node.
type bgpNode struct {
	name     string
	node     *corev1.Node
	peers    map[string]Peer
	mine     map[netip.Addr]bool
	excluded bool
}

// bgpNodeOf resolves node name's sessions, adding what is wrong with them to problems; nil
// when the cluster has no BGPPeer.
func bgpNodeOf(w *World, name string, problems *[]string) *bgpNode {
	if len(w.BGPPeers) == 0 {
		return nil
	}
	node := findNode(w.Nodes, name)
	if node == nil {
		*problems = append(*problems, fmt.Sprintf("BGP: node %s not found, so no BGPPeer can select it", name))
		return nil
	}
	n := &bgpNode{name: name, node: node, peers: map[string]Peer{}, mine: map[netip.Addr]bool{},
		excluded: rules.ExcludedFromLB(node, w.IgnoreExcludeLabel)}
	for _, ip := range rules.InternalIPs(node) {
		n.mine[ip] = true
	}
	for i := range w.BGPPeers {
		bp := &w.BGPPeers[i]
		if len(bp.Spec.NodeSelectors) > 0 && !w.selectors.MatchesAny(bp.Spec.NodeSelectors, node.Labels) {
			continue
		}
		peer, err := resolvePeer(bp, node.Labels, n.mine, w.Secrets)
		if err != nil {
			*problems = append(*problems, fmt.Sprintf("BGPPeer %s: %v", bp.Name, err))
			continue
		}
		if peer.BFD, err = peerBFD(bp, w.BFDProfiles); err != nil {
			*problems = append(*problems, fmt.Sprintf("BGPPeer %s: %v; the session runs without BFD", bp.Name, err))
		}
		n.peers[bp.Name] = peer
	}
	return n
}

// desired is the node's sessions with no route yet.
func (n *bgpNode) desired() BGP {
	d := BGP{Peers: map[string]Peer{}, Routes: map[string]map[netip.Prefix]Route{}}
	if n == nil {
		return d
	}
	for name, peer := range n.peers {
		d.Peers[name] = peer
		d.Routes[name] = map[netip.Prefix]Route{}
	}
	return d
}

// advertiseAddress adds ip of svc (from pool) to p's routes, to every session of the node's
// that an advertisement covering it sends to.
func (n *bgpNode) advertiseAddress(w *World, p *Plan, svc *corev1.Service, key string, ip netip.Addr, pool *v1alpha1.IPAddressPool, ready map[string]bool) {
	if n == nil || len(n.peers) == 0 || n.excluded {
		return
	}
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && !ready[n.name] {
		return
	}
	for i := range w.BGPAds {
		ad := &w.BGPAds[i]
		s := &ad.Spec
		if !w.selectors.Covers(s.IPAddressPools, s.IPAddressPoolSelectors, s.ServiceSelectors, pool, svc) ||
			len(s.NodeSelectors) > 0 && !w.selectors.MatchesAny(s.NodeSelectors, n.node.Labels) {
			continue
		}
		advertise(p, ad, key, ip, n.mine)
	}
}

// advertise adds ip (or its aggregate) to every session ad sends to.
func advertise(p *Plan, ad *v1alpha1.BGPAdvertisement, service string, ip netip.Addr, mine map[netip.Addr]bool) {
	s := &ad.Spec
	bits := 32
	if s.AggregationLength != nil {
		bits = int(*s.AggregationLength)
	}
	if ip.Is6() {
		bits = 128
		if s.AggregationLengthV6 != nil {
			bits = int(*s.AggregationLengthV6)
		}
	}
	prefix, err := ip.Prefix(bits)
	if err != nil {
		p.Problems = append(p.Problems, fmt.Sprintf("BGPAdvertisement %s: %v", ad.Name, err))
		return
	}
	var attrs Attrs
	for _, c := range s.Communities {
		if err := attrs.addCommunity(c); err != nil {
			p.Problems = append(p.Problems, fmt.Sprintf("BGPAdvertisement %s: %v", ad.Name, err))
		}
	}
	claim := p.Routed[ip]
	if !slices.Contains(claim.Services, service) {
		claim.Services = append(claim.Services, service)
		slices.Sort(claim.Services)
	}
	for _, name := range slices.Sorted(maps.Keys(p.BGP.Peers)) {
		peer := p.BGP.Peers[name]
		if len(s.Peers) > 0 && !slices.Contains(s.Peers, v1alpha1.Name(name)) {
			continue
		}
		a := attrs
		if peer.iBGP() && s.LocalPref != nil {
			a.LocalPref = *s.LocalPref
		}
		if peer.ipv6Session() == ip.Is4() {
			// The session's local address is of the other family: name this node's own.
			a.NextHop = addressOfFamily(mine, ip.Is4())
			if !a.NextHop.IsValid() {
				p.Problems = append(p.Problems, fmt.Sprintf("BGPPeer %s: cannot advertise %s over an %s session: this node has no %s InternalIP for the next hop",
					name, ip, familyName(!peer.ipv6Session()), familyName(ip.Is4())))
				continue
			}
		}
		routes := p.BGP.Routes[name]
		r, had := routes[prefix]
		if problem := mergeRoute(&r, had, name, Route{Prefix: prefix, Attrs: a, Services: []string{service}}); problem != "" {
			p.Problems = append(p.Problems, problem)
		}
		routes[prefix] = r
		if !slices.Contains(claim.Peers, name) {
			claim.Peers = append(claim.Peers, name)
			slices.Sort(claim.Peers)
		}
	}
	if len(claim.Peers) > 0 {
		p.Routed[ip] = claim
	}
}

// mergeRoute adds add to the route r to BGPPeer peer (had: r holds one already), and says
// when the two ask for different local-prefs.
func mergeRoute(r *Route, had bool, peer string, add Route) (problem string) {
	if !had {
		*r = Route{Prefix: add.Prefix, Attrs: add.Attrs, Services: slices.Clone(add.Services)}
		return ""
	}
	if r.Attrs.LocalPref != add.Attrs.LocalPref && r.Attrs.LocalPref != 0 && add.Attrs.LocalPref != 0 {
		problem = fmt.Sprintf("%s to BGPPeer %s: advertisements ask for local-pref %d and %d; using the higher",
			add.Prefix, peer, r.Attrs.LocalPref, add.Attrs.LocalPref)
	}
	r.Attrs = mergeAttrs(r.Attrs, add.Attrs)
	r.Services = unionSorted(r.Services, add.Services)
	return problem
}

// ListsRoutesTo are the peers this node lists the routes of prefix p to in its Speaker status:
// its address's FirstTo, or for an aggregate those of the addresses in it (aggregates are few:
// reading every address for one is the price of aggregation).
func (p Plan) ListsRoutesTo(prefix netip.Prefix) []string {
	if prefix.IsSingleIP() {
		return p.Routed[prefix.Addr()].FirstTo
	}
	var peers []string
	for ip, c := range p.Routed {
		if prefix.Contains(ip) {
			peers = unionSorted(peers, c.FirstTo)
		}
	}
	return peers
}

// unionSorted is the sorted union of two sorted lists (a new list when b adds to a).
func unionSorted(a, b []string) []string {
	out := a
	for _, s := range b {
		if i, found := slices.BinarySearch(out, s); !found {
			if len(out) == len(a) {
				out = slices.Clone(a)
			}
			out = slices.Insert(out, i, s)
		}
	}
	return out
}

// mergeAttrs combines two advertisements of one prefix to one peer: the union of communities,
// the higher local-pref.
func mergeAttrs(a, b Attrs) Attrs {
	out := a
	out.LocalPref = max(a.LocalPref, b.LocalPref)
	out.Communities = append(slices.Clone(a.Communities), b.Communities...)
	out.Large = append(slices.Clone(a.Large), b.Large...)
	slices.Sort(out.Communities)
	out.Communities = slices.Compact(out.Communities)
	slices.SortFunc(out.Large, func(x, y LargeCommunity) int {
		if x.Global != y.Global {
			return int(int64(x.Global) - int64(y.Global))
		}
		if x.Local1 != y.Local1 {
			return int(int64(x.Local1) - int64(y.Local1))
		}
		return int(int64(x.Local2) - int64(y.Local2))
	})
	out.Large = slices.Compact(out.Large)
	return out
}

// resolvePeer applies defaults, takes AS numbers from the node's labels where the peer says so
// and reads the password. Errors never contain the password.
func resolvePeer(bp *v1alpha1.BGPPeer, labels map[string]string, mine map[netip.Addr]bool, secrets []corev1.Secret) (Peer, error) {
	s := &bp.Spec
	peer := Peer{Name: bp.Name, MyASN: s.MyASN, PeerASN: s.PeerASN, Port: defaultBGPPort, Interface: s.Interface,
		HoldTime: defaultHoldTime, ConnectTime: defaultConnectTime, EBGPMultiHop: s.EBGPMultiHop, GracefulRestart: s.EnableGracefulRestart}
	var err error
	if s.MyASNFromNodeLabel != "" {
		if peer.MyASN, err = asnFromLabel(labels, s.MyASNFromNodeLabel, "myASNFromNodeLabel"); err != nil {
			return peer, err
		}
	}
	switch {
	case s.PeerASNFromNodeLabel != "":
		if peer.PeerASN, err = asnFromLabel(labels, s.PeerASNFromNodeLabel, "peerASNFromNodeLabel"); err != nil {
			return peer, err
		}
	case s.DynamicASN == v1alpha1.DynamicASNInternal:
		peer.PeerASN = peer.MyASN // iBGP: the router can only be in this node's AS
	case s.DynamicASN == v1alpha1.DynamicASNExternal:
		peer.PeerASN, peer.ExternalOnly = 0, true // learned from the router's OPEN
	}
	if peer.MyASN == 0 {
		return peer, fmt.Errorf("no local AS: set myASN or myASNFromNodeLabel")
	}
	if peer.PeerASN == 0 && !peer.ExternalOnly {
		return peer, fmt.Errorf("no router AS: set peerASN, dynamicASN or peerASNFromNodeLabel")
	}
	if s.Interface == "" {
		if peer.Address, err = netip.ParseAddr(string(s.PeerAddress)); err != nil {
			return peer, fmt.Errorf("peerAddress: %v", err)
		}
		peer.Address = peer.Address.Unmap()
	}
	if s.PeerPort != 0 {
		peer.Port = uint16(s.PeerPort)
	}
	if s.SourceAddress != "" {
		if peer.Source, err = netip.ParseAddr(string(s.SourceAddress)); err != nil {
			return peer, fmt.Errorf("sourceAddress: %v", err)
		}
		peer.Source = peer.Source.Unmap()
	}
	if s.HoldTime != nil {
		peer.HoldTime = s.HoldTime.Duration
	}
	peer.KeepaliveTime = peer.HoldTime / 3
	if s.KeepaliveTime != nil {
		peer.KeepaliveTime = s.KeepaliveTime.Duration
	}
	if s.ConnectTime != nil {
		peer.ConnectTime = s.ConnectTime.Duration
	}
	if s.RouterID != "" {
		if peer.RouterID, err = netip.ParseAddr(s.RouterID); err != nil || !peer.RouterID.Is4() {
			return peer, fmt.Errorf("routerID %q is not an IPv4 address", s.RouterID)
		}
	} else if peer.RouterID = addressOfFamily(mine, true); !peer.RouterID.IsValid() {
		return peer, fmt.Errorf("this node has no IPv4 InternalIP to use as router ID; set spec.routerID")
	}
	if ref := s.PasswordSecret; ref != nil {
		pw, err := password(ref, secrets)
		if err != nil {
			return peer, err
		}
		peer.Password = pw
	}
	return peer, nil
}

// asnFromLabel reads an AS number from the node label key; field names the BGPPeer field that
// points at it, for the error.
func asnFromLabel(labels map[string]string, key, field string) (uint32, error) {
	v, ok := labels[key]
	if !ok {
		return 0, fmt.Errorf("%s: this node has no label %s, so no session", field, key)
	}
	asn, err := strconv.ParseUint(v, 10, 32)
	if err != nil || asn == 0 {
		return 0, fmt.Errorf("%s: node label %s=%q is not an AS number (1 to 4294967295), so no session", field, key, v)
	}
	return uint32(asn), nil
}

func password(ref *v1alpha1.SecretKeyRef, secrets []corev1.Secret) (Password, error) {
	key := ref.Key
	if key == "" {
		key = "password"
	}
	for i := range secrets {
		if secrets[i].Namespace == string(ref.Namespace) && secrets[i].Name == string(ref.Name) {
			v, ok := secrets[i].Data[key]
			if !ok || len(v) == 0 {
				return "", fmt.Errorf("passwordSecret %s/%s has no key %q", ref.Namespace, ref.Name, key)
			}
			if len(v) > 80 {
				return "", fmt.Errorf("passwordSecret %s/%s: key %q is longer than the 80 bytes TCP MD5 allows", ref.Namespace, ref.Name, key)
			}
			return Password(v), nil
		}
	}
	return "", fmt.Errorf("passwordSecret %s/%s cannot be read (missing, or the speaker may not get it); the session stays closed rather than open without its password",
		ref.Namespace, ref.Name)
}

func findNode(nodes []corev1.Node, name string) *corev1.Node {
	for i := range nodes {
		if nodes[i].Name == name {
			return &nodes[i]
		}
	}
	return nil
}

// addressOfFamily is the lowest of the addresses of one family, or the zero Addr.
func addressOfFamily(addrs map[netip.Addr]bool, v4 bool) netip.Addr {
	var best netip.Addr
	for a := range addrs {
		if a.Is4() == v4 && (!best.IsValid() || a.Less(best)) {
			best = a
		}
	}
	return best
}

func familyName(v4 bool) string {
	if v4 {
		return "IPv4"
	}
	return "IPv6"
}

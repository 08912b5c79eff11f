package plan

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
)

// BGP session defaults (BGPPeer's documented defaults).
const (
	defaultBGPPort     = 179
	defaultHoldTime    = 90 * time.Second
	defaultConnectTime = 5 * time.Second
	// defaultRestartTime is the graceful restart time announced by default, as by FRR and BIRD.
	defaultRestartTime = 120 * time.Second
)

// bgpNode is what the BGP plan needs of one node: the sessions it holds (BGPPeers whose
// nodeSelectors match it and that resolve), its InternalIPs (next hops) and what
// the BGP rule reads of it (rules.BGPNode: which addresses it advertises is the rule's).
type bgpNode struct {
	name  string
	node  *corev1.Node
	peers map[string]Peer
	// bfdProblems: the peers whose sessions run without the BFD their bfdProfile asks for.
	bfdProblems map[string]BFDProblem
	mine        map[netip.Addr]bool
	rule        rules.BGPNode
}

// bgpNodeOf resolves node name's sessions, adding what is wrong with them to problems; nil
// when the cluster has no BGPPeer. fitNodes counts the live nodes that may advertise without
// reservation (rules.BGPFitNodes), for the standing of a cordoned node.
func bgpNodeOf(w *World, name string, fitNodes int, problems *[]string) *bgpNode {
	if len(w.BGPPeers) == 0 {
		return nil
	}
	node := findNode(w.Nodes, name)
	if node == nil {
		*problems = append(*problems, fmt.Sprintf("BGP: node %s not found, so no BGPPeer can select it", name))
		return nil
	}
	n := &bgpNode{name: name, node: node, peers: map[string]Peer{}, bfdProblems: map[string]BFDProblem{}, mine: map[netip.Addr]bool{},
		rule: w.selectors.BGPNodeOf(node, w.BGPPeers, w.IgnoreExcludeLabel, w.drain(), fitNodes)}
	for _, ip := range rules.InternalIPs(node) {
		n.mine[ip] = true
	}
	routerID, usesRouterID := w.routerIDOf(name), false
	for i := range w.BGPPeers {
		bp := &w.BGPPeers[i]
		if !w.selectors.BGPPeerSelects(bp, node.Labels) {
			continue
		}
		usesRouterID = usesRouterID || bp.Spec.RouterID == ""
		peer, err := resolvePeer(bp, node.Labels, routerID.ID, w.Secrets)
		if err == nil {
			err = w.checkVRF(peer.VRF)
		}
		if err != nil {
			*problems = append(*problems, fmt.Sprintf("BGPPeer %s: %v", bp.Name, err))
			continue
		}
		if peer.BFD, err = peerBFD(bp, w.BFDProfiles, w.Secrets); err != nil {
			*problems = append(*problems, fmt.Sprintf("BGPPeer %s: %v; the session runs without BFD", bp.Name, err))
			n.bfdProblems[bp.Name] = bfdProblemOf(err)
		}
		n.peers[bp.Name] = peer
	}
	if usesRouterID && routerID.Problem != "" {
		*problems = append(*problems, routerID.Problem)
	}
	n.rule.Keep(func(peer string) bool { _, ok := n.peers[peer]; return ok })
	return n
}

// routerIDOf is node name's BGP router ID (rules.RouterIDs), the table made once a plan.
func (w *World) routerIDOf(name string) rules.RouterID {
	if w.routerIDs == nil {
		w.routerIDs = rules.RouterIDs(w.Nodes)
	}
	return w.routerIDs[name]
}

// drain is what the speaker knows of drains.
func (w *World) drain() rules.Drain {
	return rules.Drain{Known: true, Now: w.Now, CordonedSince: w.CordonedSince, Grace: w.DrainGrace}
}

// graceEnds is when node n's GRACEFUL_SHUTDOWN ends in a withdrawal (zero: it is not in it, or
// it stays in it because no other node may advertise).
func (n *bgpNode) graceEnds(w *World) time.Time {
	if n == nil || n.rule.Standing != rules.BGPGracefulShutdown || w.drain().CordonedFor(n.name) >= w.DrainGrace {
		return time.Time{}
	}
	return w.Now.Add(w.DrainGrace - w.drain().CordonedFor(n.name))
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

// resolvePeer applies defaults, takes AS numbers from the node's labels where the peer says so,
// the node's router ID (routerID) unless the peer sets one, and reads the password. Errors
// never contain the password.
func resolvePeer(bp *v1alpha1.BGPPeer, labels map[string]string, routerID netip.Addr, secrets []corev1.Secret) (Peer, error) {
	s := &bp.Spec
	peer := Peer{Name: bp.Name, MyASN: s.MyASN, PeerASN: s.PeerASN, Port: defaultBGPPort, Interface: s.Interface, VRF: s.VRF,
		HoldTime: defaultHoldTime, ConnectTime: defaultConnectTime, EBGPMultiHop: s.EBGPMultiHop, GracefulRestart: s.EnableGracefulRestart}
	if err := resolveASNs(&peer, s, labels); err != nil {
		return peer, err
	}
	if err := resolveAddresses(&peer, s); err != nil {
		return peer, err
	}
	resolveTimers(&peer, s)
	peer.MaxPrefixes = s.MaxPrefixes
	if peer.MaxPrefixes == 0 { // an object the apiserver did not default (a test's)
		peer.MaxPrefixes = v1alpha1.DefaultMaxPrefixes
	}
	if err := resolveRouterID(&peer, s, routerID); err != nil {
		return peer, err
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

// resolveASNs sets the session's two AS numbers: from the node's labels where the peer says so,
// the node's own for an internal dynamic peer, none yet (the router's OPEN says) for an external one.
func resolveASNs(peer *Peer, s *v1alpha1.BGPPeerSpec, labels map[string]string) error {
	var err error
	if s.MyASNFromNodeLabel != "" {
		if peer.MyASN, err = asnFromLabel(labels, s.MyASNFromNodeLabel, "myASNFromNodeLabel"); err != nil {
			return err
		}
	}
	switch {
	case s.PeerASNFromNodeLabel != "":
		if peer.PeerASN, err = asnFromLabel(labels, s.PeerASNFromNodeLabel, "peerASNFromNodeLabel"); err != nil {
			return err
		}
	case s.DynamicASN == v1alpha1.DynamicASNInternal:
		peer.PeerASN = peer.MyASN // iBGP: the router can only be in this node's AS
	case s.DynamicASN == v1alpha1.DynamicASNExternal:
		peer.PeerASN, peer.ExternalOnly = 0, true // learned from the router's OPEN
	}
	if peer.MyASN == 0 {
		return fmt.Errorf("no local AS: set myASN or myASNFromNodeLabel")
	}
	if peer.PeerASN == 0 && !peer.ExternalOnly {
		return fmt.Errorf("no router AS: set peerASN, dynamicASN or peerASNFromNodeLabel")
	}
	return nil
}

// resolveAddresses sets where the session goes (none for an unnumbered peer, found on its
// interface), its port and its source address.
func resolveAddresses(peer *Peer, s *v1alpha1.BGPPeerSpec) error {
	var err error
	if s.Interface == "" {
		if peer.Address, err = netip.ParseAddr(string(s.PeerAddress)); err != nil {
			return fmt.Errorf("peerAddress: %v", err)
		}
		peer.Address = peer.Address.Unmap()
	}
	if s.PeerPort != 0 {
		peer.Port = uint16(s.PeerPort)
	}
	if s.SourceAddress != "" {
		if peer.Source, err = netip.ParseAddr(string(s.SourceAddress)); err != nil {
			return fmt.Errorf("sourceAddress: %v", err)
		}
		peer.Source = peer.Source.Unmap()
	}
	return nil
}

// resolveTimers sets the hold, keepalive (a third of the hold time unless set), connect and
// graceful restart times over their defaults.
func resolveTimers(peer *Peer, s *v1alpha1.BGPPeerSpec) {
	if s.HoldTime != nil {
		peer.HoldTime = s.HoldTime.Duration
	}
	if peer.GracefulRestart {
		peer.GracefulRestartTime = defaultRestartTime
		if s.GracefulRestartTime != nil {
			peer.GracefulRestartTime = s.GracefulRestartTime.Duration
		}
	}
	peer.KeepaliveTime = peer.HoldTime / 3
	if s.KeepaliveTime != nil {
		peer.KeepaliveTime = s.KeepaliveTime.Duration
	}
	if s.ConnectTime != nil {
		peer.ConnectTime = s.ConnectTime.Duration
	}
}

// resolveRouterID sets the router ID the peer names, or else the node's (rules.RouterIDs).
func resolveRouterID(peer *Peer, s *v1alpha1.BGPPeerSpec, routerID netip.Addr) error {
	var err error
	if s.RouterID != "" {
		if peer.RouterID, err = netip.ParseAddr(s.RouterID); err != nil || !peer.RouterID.Is4() {
			return fmt.Errorf("routerID %q is not an IPv4 address", s.RouterID)
		}
	} else {
		peer.RouterID = routerID
	}
	return nil
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
	v, err := secretKey("passwordSecret", ref, secrets)
	if err != nil {
		return "", fmt.Errorf("%w; the session stays closed rather than open without its password", err)
	}
	if len(v) > 80 {
		return "", fmt.Errorf("passwordSecret %s/%s: key %q is longer than the 80 bytes TCP MD5 allows", ref.Namespace, ref.Name, refKey(ref))
	}
	return Password(v), nil
}

// secretKey is the value under ref's key (default "password") among the Secrets the speaker
// read; field names the API field that points at it, for the error.
func secretKey(field string, ref *v1alpha1.SecretKeyRef, secrets []corev1.Secret) ([]byte, error) {
	for i := range secrets {
		if secrets[i].Namespace == string(ref.Namespace) && secrets[i].Name == string(ref.Name) {
			v, ok := secrets[i].Data[refKey(ref)]
			if !ok || len(v) == 0 {
				return nil, fmt.Errorf("%s %s/%s has no key %q", field, ref.Namespace, ref.Name, refKey(ref))
			}
			return v, nil
		}
	}
	return nil, fmt.Errorf("%s %s/%s cannot be read (missing, or the speaker may not get it)", field, ref.Namespace, ref.Name)
}

func refKey(ref *v1alpha1.SecretKeyRef) string {
	if ref.Key == "" {
		return "password"
	}
	return ref.Key
}

func findNode(nodes []corev1.Node, name string) *corev1.Node {
	for i := range nodes {
		if nodes[i].Name == name {
			return &nodes[i]
		}
	}
	return nil
}

func familyName(v4 bool) string {
	if v4 {
		return "IPv4"
	}
	return "IPv6"
}

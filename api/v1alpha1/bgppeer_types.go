package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SecretKeyRef points at one key of a Secret.
type SecretKeyRef struct {
	Namespace Name `json:"namespace"`
	Name      Name `json:"name"`
	// Key in the Secret's data.
	// +kubebuilder:default=password
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}

// DynamicASN lets the router's AS number be learned from its OPEN message.
// +kubebuilder:validation:Enum=internal;external
type DynamicASN string

const (
	// DynamicASNInternal: the router is in this node's AS (iBGP).
	DynamicASNInternal DynamicASN = "internal"
	// DynamicASNExternal: the router is in any other AS (eBGP).
	DynamicASNExternal DynamicASN = "external"
)

// BGPPeerSpec describes one BGP session that matching nodes open to a router.
//
// +kubebuilder:validation:XValidation:rule="!has(self.holdTime) || !has(self.keepaliveTime) || duration(self.holdTime) == duration('0s') || duration(self.keepaliveTime) < duration(self.holdTime)",message="keepaliveTime must be shorter than holdTime",fieldPath=".keepaliveTime"
// +kubebuilder:validation:XValidation:rule="(has(self.myASN) ? 1 : 0) + (has(self.myASNFromNodeLabel) ? 1 : 0) == 1",message="set exactly one of myASN and myASNFromNodeLabel"
// +kubebuilder:validation:XValidation:rule="(has(self.peerASN) ? 1 : 0) + (has(self.dynamicASN) ? 1 : 0) + (has(self.peerASNFromNodeLabel) ? 1 : 0) == 1",message="set exactly one of peerASN, dynamicASN and peerASNFromNodeLabel"
// +kubebuilder:validation:XValidation:rule="(has(self.peerAddress) ? 1 : 0) + (has(self.interface) ? 1 : 0) == 1",message="set exactly one of peerAddress and interface"
// +kubebuilder:validation:XValidation:rule="!has(self.interface) || (!has(self.sourceAddress) && !has(self.ebgpMultiHop))",message="an interface peer is directly connected: no sourceAddress, no ebgpMultiHop"
// +kubebuilder:validation:XValidation:rule="!has(self.interface) || !has(self.vrf)",message="vrf is not supported with an interface (unnumbered) peer"
// +kubebuilder:validation:XValidation:rule="!has(self.gracefulRestartTime) || (has(self.enableGracefulRestart) && self.enableGracefulRestart)",message="gracefulRestartTime needs enableGracefulRestart: true",fieldPath=".gracefulRestartTime"
type BGPPeerSpec struct {
	// MyASN is the speaker's autonomous system number for this session (each BGPPeer may
	// use another).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	// +optional
	MyASN uint32 `json:"myASN,omitempty"`

	// MyASNFromNodeLabel names a node label that holds the speaker's AS number, so the nodes
	// of each rack take the rack's AS from one BGPPeer. A node whose label is missing or is
	// not an AS number opens no session and says why in its Speaker status.
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:MinLength=1
	// +optional
	MyASNFromNodeLabel string `json:"myASNFromNodeLabel,omitempty"`

	// PeerASN is the router's autonomous system number; equal to myASN means iBGP.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	// +optional
	PeerASN uint32 `json:"peerASN,omitempty"`

	// DynamicASN, instead of peerASN, takes the router's AS number from its OPEN: internal
	// (it must be myASN: iBGP) or external (any other: eBGP).
	// +optional
	DynamicASN DynamicASN `json:"dynamicASN,omitempty"`

	// PeerASNFromNodeLabel names a node label that holds the router's AS number (each rack's
	// leaf in its own AS).
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:MinLength=1
	// +optional
	PeerASNFromNodeLabel string `json:"peerASNFromNodeLabel,omitempty"`

	// PeerAddress is the router's address.
	// +optional
	PeerAddress IPAddress `json:"peerAddress,omitempty"`

	// Interface, instead of peerAddress, peers unnumbered: with the router at the other end of
	// this point-to-point link, at the IPv6 link-local address it sends router advertisements
	// from.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[^/: ]+$`
	// +optional
	Interface string `json:"interface,omitempty"`

	// VRF names a Linux VRF device on the node (ip link add NAME type vrf table N): the
	// session is opened through it (bound to the device), so the router is reached by the
	// VRF's routing table and interfaces, and the routes' next hop is the address the
	// session leaves from there. A node without that VRF device opens no session and says
	// why in its Speaker status. Not with interface; a bfdProfile is ignored (BFD is not
	// run through a VRF yet) with a problem reported.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[^/: ]+$`
	// +optional
	VRF string `json:"vrf,omitempty"`

	// PeerPort is the router's TCP port.
	// +kubebuilder:default=179
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	PeerPort int32 `json:"peerPort,omitempty"`

	// SourceAddress is the local address the session is opened from; by default the kernel
	// picks one.
	// +optional
	SourceAddress IPAddress `json:"sourceAddress,omitempty"`

	// HoldTime is proposed to the router: 0 (no keepalives) or at least 3s. Default 90s.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration('0s') || (duration(self) >= duration('3s') && duration(self) <= duration('65535s'))",message="holdTime must be 0s or between 3s and 65535s (RFC 4271)"
	// +optional
	HoldTime *metav1.Duration `json:"holdTime,omitempty"`

	// KeepaliveTime is the interval between keepalives. Default a third of holdTime.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('21845s')",message="keepaliveTime must be between 0s and 21845s"
	// +optional
	KeepaliveTime *metav1.Duration `json:"keepaliveTime,omitempty"`

	// ConnectTime is the wait between attempts to open the session. Default 5s, so a lost
	// session comes back within seconds.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('65535s')",message="connectTime must be between 1s and 65535s"
	// +optional
	ConnectTime *metav1.Duration `json:"connectTime,omitempty"`

	// RouterID overrides the BGP identifier, an IPv4 address; by default the node's.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="routerID must be an IPv4 address"
	// +optional
	RouterID string `json:"routerID,omitempty"`

	// NodeSelectors limit the nodes that open this session; empty means every node.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	NodeSelectors []metav1.LabelSelector `json:"nodeSelectors,omitempty"`

	// PasswordSecret holds the TCP MD5 password. It is never logged, nor copied into status
	// or events.
	// +optional
	PasswordSecret *SecretKeyRef `json:"passwordSecret,omitempty"`

	// EBGPMultiHop allows an eBGP router that is not directly connected.
	// +optional
	EBGPMultiHop bool `json:"ebgpMultiHop,omitempty"`

	// EnableGracefulRestart (RFC 4724) keeps the router's routes while a speaker restarts: a
	// planned restart on a node that stays (a DaemonSet rolling update, the speaker pod deleted)
	// and a crash. A stop for good (the node cordoned or drained, excluded, not Ready or being
	// deleted, the DaemonSet deleted) withdraws them at once all the same.
	// +optional
	EnableGracefulRestart bool `json:"enableGracefulRestart,omitempty"`

	// GracefulRestartTime is the restart time announced to the router: how long it keeps this
	// node's routes, stale, waiting for the session to come back. Default 120s; at most 4095s
	// (12 bits). Needs enableGracefulRestart.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('4095s')",message="gracefulRestartTime must be between 1s and 4095s (RFC 4724: 12 bits of seconds)"
	// +optional
	GracefulRestartTime *metav1.Duration `json:"gracefulRestartTime,omitempty"`

	// BFDProfile names a BFDProfile: each node then runs a BFD session with the router, and the
	// BGP session is reset (its routes withdrawn) as soon as BFD declares the path down. Single
	// hop only: ignored, with a problem reported, on ebgpMultiHop peers.
	// +optional
	BFDProfile Name `json:"bfdProfile,omitempty"`

	// MaxPrefixes is the most routes the router may send on this session per address family
	// (IPv4 and IPv6 unicast). The speaker uses none of them (it only advertises), but its BGP
	// side keeps what it receives: one route more and the session is ceased (RFC 4486 Cease,
	// Maximum Number of Prefixes Reached), which this peer's status reports for the node, and
	// opened again a minute later. Default 10000, well within the BGP side's memory limit.
	// +kubebuilder:default=10000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	// +optional
	MaxPrefixes uint32 `json:"maxPrefixes,omitempty"`
}

// DefaultMaxPrefixes is BGPPeerSpec.MaxPrefixes's default: a router's full table is near a
// million routes, a rack's fabric routes a few thousand; ten thousand cost the BGP side about
// 20 MiB.
const DefaultMaxPrefixes = 10000

// BGPSessionState is the state of one node's session with one router.
type BGPSessionState struct {
	// Node whose speaker holds the session.
	Node string `json:"node"`
	// State as BGP names it: Idle, Connect, Active, OpenSent, OpenConfirm, Established.
	State string `json:"state"`
	// Since is when the session entered this state.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// Message explains a session that is not Established (the last error seen).
	// +optional
	Message string `json:"message,omitempty"`
	// Reason, in a word, why the speaker keeps the session down: PrefixLimitReached.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Reason string `json:"reason,omitempty"`
}

// BGPPeerStatus is written by the controller, folded from the Speaker objects.
type BGPPeerStatus struct {
	// Sessions, one per node that matches the peer's nodeSelectors.
	// +listType=map
	// +listMapKey=node
	// +optional
	Sessions []BGPSessionState `json:"sessions,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BGPPeer is a router that speakers on matching nodes peer with.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=portico
// +kubebuilder:printcolumn:name="Peer",type=string,JSONPath=`.spec.peerAddress`
// +kubebuilder:printcolumn:name="Interface",type=string,JSONPath=`.spec.interface`,priority=1
// +kubebuilder:printcolumn:name="VRF",type=string,JSONPath=`.spec.vrf`,priority=1
// +kubebuilder:printcolumn:name="Peer-ASN",type=integer,JSONPath=`.spec.peerASN`
// +kubebuilder:printcolumn:name="My-ASN",type=integer,JSONPath=`.spec.myASN`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BGPPeer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec BGPPeerSpec `json:"spec"`
	// +optional
	Status BGPPeerStatus `json:"status,omitempty"`
}

// BGPPeerList is a list of BGPPeers.
//
// +kubebuilder:object:root=true
type BGPPeerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPPeer `json:"items"`
}

func init() {
	register(&BGPPeer{}, &BGPPeerList{})
}

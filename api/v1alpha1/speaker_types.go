package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Protocol is how an address is announced.
// +kubebuilder:validation:Enum=L2;BGP
type Protocol string

const (
	ProtocolL2  Protocol = "L2"
	ProtocolBGP Protocol = "BGP"
)

// Announcement is one address a speaker announces.
type Announcement struct {
	// IP is the announced address.
	IP string `json:"ip"`
	// Service is "namespace/name".
	Service  string   `json:"service"`
	Protocol Protocol `json:"protocol"`
	// Interfaces the address is answered on (L2).
	// +listType=atomic
	// +optional
	Interfaces []string `json:"interfaces,omitempty"`
	// Peers the address is advertised to (BGP), by BGPPeer name.
	// +listType=atomic
	// +optional
	Peers []string `json:"peers,omitempty"`
	// Since is when this node began answering for the address (L2), kept while it goes on
	// answering: the L2 owner of an address stays the node holding it, and of two nodes
	// listing it the later one holds it (docs/speaker-l2.md, "Placement").
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
}

// PeerSession is this node's session with one BGPPeer.
type PeerSession struct {
	// Peer is the BGPPeer's name.
	Peer string `json:"peer"`
	// State as BGP names it: Idle, Connect, Active, OpenSent, OpenConfirm, Established.
	State string `json:"state"`
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// Message is the last error seen on a session that is not Established.
	// +optional
	Message string `json:"message,omitempty"`
	// Reason, in a word, why the speaker keeps the session down: PrefixLimitReached.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Reason string `json:"reason,omitempty"`
	// BFDReason is set when the BGPPeer names a bfdProfile this node cannot apply, so the
	// session runs without BFD: BFDKeyUnusable, BFDProfileNotFound or BFDNotSupported.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	BFDReason string `json:"bfdReason,omitempty"`
	// BFDMessage says why, naming the profile or the Secret (never the key).
	// +optional
	BFDMessage string `json:"bfdMessage,omitempty"`
}

// Self-check results come from whoever answers on the LAN, so their size is capped: at most
// MaxSelfCheckMACs answering MACs per address and MaxSelfChecks addresses per Speaker (the
// rest are counted, not listed). At the worst (every entry an IPv6 address of 39 characters
// with four MACs and both counts at their widest) an entry is under 200 bytes of JSON, so the
// self-checks stay under 200 KiB: an eighth of the apiserver's 1.5 MiB object limit, leaving
// the rest to the announcements.
const (
	MaxSelfCheckMACs = 4
	MaxSelfChecks    = 1024
)

// SelfCheck is the result of probing an address this node does not own.
type SelfCheck struct {
	// IP that was probed.
	// +kubebuilder:validation:MaxLength=39
	IP string `json:"ip"`
	// MACs that answered, empty when nobody did; at most 4 (the lowest), the others counted in
	// omittedMACs. Two or more already mean trouble (a split brain or a foreign host).
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:MaxLength=17
	// +listType=atomic
	// +optional
	MACs []string `json:"macs,omitempty"`
	// OmittedMACs counts the MACs that answered beyond those listed.
	// +kubebuilder:validation:Minimum=0
	// +optional
	OmittedMACs int32 `json:"omittedMACs,omitempty"`
	// Time of the probe.
	Time metav1.Time `json:"time"`
}

// MaxForeignAnswers caps a Speaker's status.foreignAnswers: whoever is on the LAN can answer.
const MaxForeignAnswers = 64

// ForeignAnswer is a foreign host's answer to this speaker's probe of a pool address that no
// Service holds yet (one of the pool's nextAddresses or inUse).
type ForeignAnswer struct {
	// +kubebuilder:validation:MaxLength=39
	IP string `json:"ip"`
	// +kubebuilder:validation:MaxLength=17
	MAC string `json:"mac"`
	// Interface the answer came in on.
	// +kubebuilder:validation:MaxLength=15
	Interface string `json:"interface"`
	// Since is the first probe round that heard this MAC answer for ip.
	Since metav1.Time `json:"since"`
}

// MaxSpeakerInterfaces caps the interfaces a Speaker status lists: a node with many pods has a
// veth for each.
const MaxSpeakerInterfaces = 64

// SpeakerInterface is one of the node's network interfaces and whether it answers ARP/NDP for
// addresses whose L2Advertisements name no interface.
type SpeakerInterface struct {
	// +kubebuilder:validation:MaxLength=15
	Name string `json:"name"`
	// Answers: the interface is suitable; an address is answered on those suitable interfaces
	// whose subnet holds it when there are any, else on all of them.
	Answers bool `json:"answers"`
	// Reason the interface is left out ("port of br0, which answers for it", "named veth*: ...").
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Reason string `json:"reason,omitempty"`
}

// SpeakerStatus is what one node's speaker announces and sees. Only that speaker writes it.
type SpeakerStatus struct {
	// Announcements lists every address this node announces.
	// +listType=atomic
	// +optional
	Announcements []Announcement `json:"announcements,omitempty"`
	// L2Announcements counts the addresses this node answers for over L2, for `kubectl get speakers`.
	// +optional
	L2Announcements int32 `json:"l2Announcements,omitempty"`
	// Sessions lists this node's BGP sessions.
	// +listType=map
	// +listMapKey=peer
	// +optional
	Sessions []PeerSession `json:"sessions,omitempty"`
	// BGPPeersUp counts Established sessions, for `kubectl get speakers`.
	// +optional
	BGPPeersUp int32 `json:"bgpPeersUp,omitempty"`
	// BGP is what the sessions carry: the AS numbers in use and the routes with their attributes.
	// +optional
	BGP *SpeakerBGP `json:"bgp,omitempty"`
	// SelfChecks are the latest probe results, sorted by IP: at most 1024, those where
	// something is wrong (not exactly one answer) first, the others counted in
	// omittedSelfChecks.
	// +kubebuilder:validation:MaxItems=1024
	// +listType=atomic
	// +optional
	SelfChecks []SelfCheck `json:"selfChecks,omitempty"`
	// OmittedSelfChecks counts the probe results left out of selfChecks.
	// +kubebuilder:validation:Minimum=0
	// +optional
	OmittedSelfChecks int32 `json:"omittedSelfChecks,omitempty"`
	// ForeignAnswers are the answers of foreign hosts (MACs no speaker answers with) to the
	// conflict probes of pool addresses not yet handed out, each kept until its MAC leaves the
	// address unanswered for several rounds in a row, at most 64, sorted by IP.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	ForeignAnswers []ForeignAnswer `json:"foreignAnswers,omitempty"`
	// ProbedAt is when the latest conflict probe round ended, set while foreignAnswers lists
	// anything: the controller counts foreignAnswers only while the speaker is Ready and
	// ProbedAt is recent (docs/speaker-l2.md), so a speaker that stopped does not hold
	// addresses back.
	// +optional
	ProbedAt *metav1.Time `json:"probedAt,omitempty"`
	// HardwareAddrs are the MACs this speaker answers ARP/NDP with (its L2 interfaces'), so a
	// probe's answer can be told apart from a foreign host's.
	// +listType=atomic
	// +optional
	HardwareAddrs []string `json:"hardwareAddrs,omitempty"`
	// IgnoreExcludeLabel: this speaker runs with --ignore-exclude-lb-label, so nodes labelled
	// node.kubernetes.io/exclude-from-external-load-balancers announce too. The controller and
	// kubectl portico explain read it to name the node the speakers elect.
	// +optional
	IgnoreExcludeLabel bool `json:"ignoreExcludeLabel,omitempty"`
	// Interfaces are the node's network interfaces: those that answer first, then those left
	// out with the reason, at most 64, the others counted in omittedInterfaces.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Interfaces []SpeakerInterface `json:"interfaces,omitempty"`
	// Subnets are the subnets (masked prefixes) of the node's up interfaces that answer by
	// default: an address is answered over L2 by a node with one holding it, while any such
	// node is eligible. An empty list says no interface is up; a speaker that does not
	// report it (absent) is taken to answer anywhere.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=43
	// +nullable
	// +listType=atomic
	// +optional
	Subnets []string `json:"subnets"`
	// Handoffs are the addresses this node took over from a node that stayed up, and to which
	// it passes the connections opened through that node, sorted by IP (docs/speaker-l2.md,
	// "What survives which move").
	// +kubebuilder:validation:MaxItems=1024
	// +listType=atomic
	// +optional
	Handoffs []Handoff `json:"handoffs,omitempty"`
	// FlowShare is the latest round this node asked the members to share their flows in,
	// before changing its place in its BGP addresses' ECMP sets (docs/speaker-bgp.md, "What
	// survives which move").
	// +optional
	FlowShare *FlowShare `json:"flowShare,omitempty"`
	// OmittedInterfaces counts the interfaces left out of interfaces.
	// +kubebuilder:validation:Minimum=0
	// +optional
	OmittedInterfaces int32 `json:"omittedInterfaces,omitempty"`
	// ConfigErrors are configuration problems this speaker sees (an interface that does not
	// exist here, a Secret it cannot read, ...).
	// +listType=atomic
	// +optional
	ConfigErrors []string `json:"configErrors,omitempty"`
	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Handoff is one address whose connections this node passes on to the address's previous
// owner.
type Handoff struct {
	// IP is the address.
	IP string `json:"ip"`
	// Node is the previous owner, Via its address the connections are routed to.
	Node string `json:"node,omitempty"`
	Via  string `json:"via"`
	// PickupUntil is when this node stops picking up connections for the previous owner; the
	// connections it picked up go on after it.
	// +optional
	PickupUntil *metav1.Time `json:"pickupUntil,omitempty"`
}

// FlowShare is one flow-sharing round this node asked for.
type FlowShare struct {
	// At is when it began; Reason why: bgp-standing (cordoned, the drain grace over,
	// uncordoned, the speaker's first plan).
	At     metav1.Time `json:"at"`
	Reason string      `json:"reason"`
	// Complete: every member acked every other member's flows within the bound; Missing lists
	// the acks that did not come ("receiver<-holder"), at most 16.
	Complete bool `json:"complete"`
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Missing []string `json:"missing,omitempty"`
	// Members is how many members shared; Took how long the round took.
	Members int32           `json:"members"`
	Took    metav1.Duration `json:"took"`
}

// Speaker is one node's report of what it announces; its name is the node's name.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=portico
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="L2",type=integer,JSONPath=`.status.l2Announcements`
// +kubebuilder:printcolumn:name="BGP-Peers-Up",type=integer,JSONPath=`.status.bgpPeersUp`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Speaker struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Status SpeakerStatus `json:"status,omitempty"`
}

// SpeakerList is a list of Speakers.
//
// +kubebuilder:object:root=true
type SpeakerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Speaker `json:"items"`
}

func init() {
	register(&Speaker{}, &SpeakerList{})
}

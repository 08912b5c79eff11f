package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BFD profile defaults (MetalLB's): a dead path is detected after 3 × 300 ms.
const (
	DefaultBFDInterval   = 300 // milliseconds
	DefaultBFDMultiplier = 3
	DefaultBFDMinimumTTL = 254 // multihop: one router on the way
)

// BFDProfileSpec sets the timers of the BFD sessions (RFC 5880 asynchronous mode, RFC 5881 single
// hop) of every BGPPeer that names the profile. Echo mode is not supported.
type BFDProfileSpec struct {
	// ReceiveInterval is the shortest interval, in milliseconds, at which this node can take
	// BFD packets from the router. Default 300.
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=60000
	// +optional
	ReceiveInterval *uint32 `json:"receiveInterval,omitempty"`

	// TransmitInterval is the interval, in milliseconds, at which this node would like to send;
	// the slower of it and the router's receive interval is used. Default 300.
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=60000
	// +optional
	TransmitInterval *uint32 `json:"transmitInterval,omitempty"`

	// DetectMultiplier is how many packets in a row may be lost before the router declares the
	// path down (the router's detection time is this times the agreed interval). Default 3.
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=255
	// +optional
	DetectMultiplier *uint32 `json:"detectMultiplier,omitempty"`

	// PassiveMode makes the node wait for the router's first BFD packet instead of sending
	// first.
	// +optional
	PassiveMode bool `json:"passiveMode,omitempty"`

	// MinimumTTL is the least TTL accepted on multihop sessions (RFC 5883: BGPPeers with
	// ebgpMultiHop), default 254 (one router on the way). A single-hop session always requires
	// TTL 255.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=254
	// +optional
	MinimumTTL *uint32 `json:"minimumTtl,omitempty"`

	// Authentication signs every BFD packet and drops every packet from the router that is not
	// signed with the same key (RFC 5880 §6.7.4). Without it, anyone on the path who learns the
	// session's discriminators can forge a Down and withdraw the node's routes.
	// +optional
	Authentication *BFDAuthentication `json:"authentication,omitempty"`
}

// BFDAuthenticationType is a BFD authentication type. Simple passwords (sent in clear) and MD5
// are not offered.
// +kubebuilder:validation:Enum=KeyedSHA1;MeticulousKeyedSHA1
type BFDAuthenticationType string

const (
	// BFDKeyedSHA1 signs each packet; a recorded packet can be replayed while the session
	// stays in the state it was sent in.
	BFDKeyedSHA1 BFDAuthenticationType = "KeyedSHA1"
	// BFDMeticulousKeyedSHA1 signs and numbers each packet, so none can be replayed.
	BFDMeticulousKeyedSHA1 BFDAuthenticationType = "MeticulousKeyedSHA1"
)

// BFDAuthentication is the key a BFD session signs and checks packets with.
type BFDAuthentication struct {
	// Type is KeyedSHA1 or MeticulousKeyedSHA1, as configured on the router.
	Type BFDAuthenticationType `json:"type"`

	// KeyID is the key's number, 0 to 255, as configured on the router. Default 0.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=255
	// +optional
	KeyID *uint32 `json:"keyID,omitempty"`

	// SecretRef is the Secret key holding the shared key, 1 to 20 bytes. The Secret must be in
	// Portico's namespace, the only one the speakers may read.
	SecretRef SecretKeyRef `json:"secretRef"`
}

// BFDProfile is a reusable set of BFD timers, named by BGPPeers' bfdProfile.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=portico
// +kubebuilder:printcolumn:name="Receive",type=integer,JSONPath=`.spec.receiveInterval`
// +kubebuilder:printcolumn:name="Transmit",type=integer,JSONPath=`.spec.transmitInterval`
// +kubebuilder:printcolumn:name="Multiplier",type=integer,JSONPath=`.spec.detectMultiplier`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BFDProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec BFDProfileSpec `json:"spec,omitempty"`
}

// BFDProfileList is a list of BFDProfiles.
//
// +kubebuilder:object:root=true
type BFDProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BFDProfile `json:"items"`
}

func init() {
	register(&BFDProfile{}, &BFDProfileList{})
}

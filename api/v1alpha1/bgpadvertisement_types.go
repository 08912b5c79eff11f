package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Community is a BGP community: standard "65000:100" (two numbers up to 65535), large
// "large:64512:1:2" (three numbers up to 4294967295), or a well-known name.
//
// +kubebuilder:validation:MaxLength=40
// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]{1,5}:[0-9]{1,5}$') || self.matches('^large:[0-9]{1,10}:[0-9]{1,10}:[0-9]{1,10}$') || self in ['no-export', 'no-advertise', 'no-export-subconfed', 'no-peer', 'blackhole']",message="must be a standard community such as 65000:100, a large community such as large:64512:1:2, or one of no-export, no-advertise, no-export-subconfed, no-peer, blackhole"
// +kubebuilder:validation:XValidation:rule="!self.matches('^[0-9]{1,5}:[0-9]{1,5}$') || self.split(':').all(n, int(n) <= 65535)",message="each number of a standard community must be at most 65535"
// +kubebuilder:validation:XValidation:rule="!self.matches('^large:[0-9]{1,10}:[0-9]{1,10}:[0-9]{1,10}$') || self.split(':').all(n, n == 'large' || int(n) <= 4294967295)",message="each number of a large community must be at most 4294967295"
type Community string

// BGPAdvertisementSpec says how pools' addresses are advertised to BGP peers. Empty pool
// lists select every pool; empty peers means every peer.
//
// +kubebuilder:validation:XValidation:rule="!has(self.serviceSelectors) || size(self.serviceSelectors) == 0 || ((!has(self.aggregationLength) || self.aggregationLength == 32) && (!has(self.aggregationLengthV6) || self.aggregationLengthV6 == 128))",message="serviceSelectors cannot be combined with aggregation: an aggregate would also cover Services the selectors leave out",fieldPath=".serviceSelectors"
type BGPAdvertisementSpec struct {
	// IPAddressPools names the pools to advertise.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	IPAddressPools []Name `json:"ipAddressPools,omitempty"`

	// IPAddressPoolSelectors select the pools to advertise by label.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	IPAddressPoolSelectors []metav1.LabelSelector `json:"ipAddressPoolSelectors,omitempty"`

	// AggregationLength is the prefix length IPv4 addresses are advertised with.
	// +kubebuilder:default=32
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=32
	// +optional
	AggregationLength *int32 `json:"aggregationLength,omitempty"`

	// AggregationLengthV6 is the prefix length IPv6 addresses are advertised with.
	// +kubebuilder:default=128
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=128
	// +optional
	AggregationLengthV6 *int32 `json:"aggregationLengthV6,omitempty"`

	// LocalPref is sent to iBGP peers only.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	// +optional
	LocalPref *uint32 `json:"localPref,omitempty"`

	// Communities attached to every advertised prefix.
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	Communities []Community `json:"communities,omitempty"`

	// WeightByEndpoints attaches the link-bandwidth extended community (non-transitive,
	// draft-ietf-idr-link-bandwidth) to the routes of Services with externalTrafficPolicy Local:
	// 1 Mbit/s per ready endpoint of the Service on the advertising node, so a router doing
	// weighted ECMP (FRR: bgp bestpath bandwidth) splits traffic by endpoints, not by nodes.
	// Services with externalTrafficPolicy Cluster get no community: every node forwards to
	// every endpoint.
	// +optional
	WeightByEndpoints bool `json:"weightByEndpoints,omitempty"`

	// Peers names the BGPPeers to advertise to.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	Peers []Name `json:"peers,omitempty"`

	// NodeSelectors limit the nodes that advertise; empty means every node.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	NodeSelectors []metav1.LabelSelector `json:"nodeSelectors,omitempty"`

	// ServiceSelectors limit the Services advertised; empty means every Service.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	ServiceSelectors []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

// BGPAdvertisementStatus is written by the controller only.
type BGPAdvertisementStatus struct {
	// Conditions: Ready is True (Valid) when every pool and peer it names exists and its
	// selectors select something, else False naming each problem (UnknownPool, NoPool,
	// UnknownPeer, NoPeer, NoNode, InvalidSelector). The advertisement is used as it is either
	// way.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BGPAdvertisement advertises pools' addresses to BGP peers.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=portico
// +kubebuilder:printcolumn:name="Pools",type=string,JSONPath=`.spec.ipAddressPools`
// +kubebuilder:printcolumn:name="Peers",type=string,JSONPath=`.spec.peers`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BGPAdvertisement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec BGPAdvertisementSpec `json:"spec,omitempty"`
	// +optional
	Status BGPAdvertisementStatus `json:"status,omitempty"`
}

// BGPAdvertisementList is a list of BGPAdvertisements.
//
// +kubebuilder:object:root=true
type BGPAdvertisementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPAdvertisement `json:"items"`
}

func init() {
	register(&BGPAdvertisement{}, &BGPAdvertisementList{})
}

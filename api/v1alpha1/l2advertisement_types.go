package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// L2AdvertisementSpec says which pools are announced over ARP/NDP, from which nodes and on
// which interfaces. Empty pool lists select every pool.
type L2AdvertisementSpec struct {
	// IPAddressPools names the pools to announce.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	IPAddressPools []Name `json:"ipAddressPools,omitempty"`

	// IPAddressPoolSelectors select the pools to announce by label.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	IPAddressPoolSelectors []metav1.LabelSelector `json:"ipAddressPoolSelectors,omitempty"`

	// NodeSelectors limit the nodes that may announce; empty means every node.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	NodeSelectors []metav1.LabelSelector `json:"nodeSelectors,omitempty"`

	// PreferredNodeSelectors make some eligible nodes answer before others: each address is
	// answered by an eligible node with the highest sum of the weights of the preferences it
	// matches (the hash election decides among equals), and by the others only when no
	// preferred node may answer. Weights from every L2Advertisement announcing an address add
	// up. They never make a node eligible: nodeSelectors do.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	PreferredNodeSelectors []PreferredNodeSelector `json:"preferredNodeSelectors,omitempty"`

	// Interfaces to answer on, by name ("eth0") or pattern ("eth*", "enp?s0": "*" stands for any
	// characters, "?" for one); empty means the node's suitable interfaces, chosen by the
	// speaker (its Speaker status lists them and why others are left out).
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	Interfaces []InterfaceName `json:"interfaces,omitempty"`

	// ServiceSelectors limit the Services announced; empty means every Service.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	ServiceSelectors []metav1.LabelSelector `json:"serviceSelectors,omitempty"`

	// GratuitousInterval makes the answering node send gratuitous ARP (IPv4) or an unsolicited
	// neighbour advertisement (IPv6) for each address it announces every interval, not only
	// when it takes the address over: a switch whose forwarding table forgets the node's MAC
	// before any client asks for the address again (its aging time, often 300s) floods or
	// drops the traffic meanwhile. Between 1s and 1h; unset (the default): only on takeover.
	// Where several L2Advertisements announce an address, the shortest interval wins.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="gratuitousInterval must be between 1s and 1h"
	// +optional
	GratuitousInterval *metav1.Duration `json:"gratuitousInterval,omitempty"`
}

// PreferredNodeSelector is a weighted soft preference for the nodes its selector matches, as
// a Pod's preferredDuringSchedulingIgnoredDuringExecution node affinity term.
//
// +kubebuilder:validation:XValidation:rule="(has(self.preference.matchLabels) && size(self.preference.matchLabels) > 0) || (has(self.preference.matchExpressions) && size(self.preference.matchExpressions) > 0)",message="preference must name labels (matchLabels or matchExpressions): an empty selector matches every node and prefers none",fieldPath=".preference"
type PreferredNodeSelector struct {
	// Weight added to a matching node's preference, 1 to 100.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Weight int32 `json:"weight"`
	// Preference selects the nodes given the weight.
	Preference metav1.LabelSelector `json:"preference"`
}

// L2AdvertisementStatus is written by the controller only.
type L2AdvertisementStatus struct {
	// Conditions: Ready is True (Valid) when every pool it names exists and its selectors
	// select something, else False naming each problem (UnknownPool, NoPool, NoNode,
	// InvalidSelector). The advertisement is used as it is either way.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// L2Advertisement announces pools' addresses on the local network over ARP (IPv4) and NDP
// (IPv6), from one elected node per address.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=portico
// +kubebuilder:printcolumn:name="Pools",type=string,JSONPath=`.spec.ipAddressPools`
// +kubebuilder:printcolumn:name="Interfaces",type=string,JSONPath=`.spec.interfaces`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type L2Advertisement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec L2AdvertisementSpec `json:"spec,omitempty"`
	// +optional
	Status L2AdvertisementStatus `json:"status,omitempty"`
}

// L2AdvertisementList is a list of L2Advertisements.
//
// +kubebuilder:object:root=true
type L2AdvertisementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []L2Advertisement `json:"items"`
}

func init() {
	register(&L2Advertisement{}, &L2AdvertisementList{})
}

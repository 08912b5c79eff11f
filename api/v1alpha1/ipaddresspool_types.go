package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AddressRange is one entry of a pool: a CIDR ("10.0.0.0/24", "2001:db8::/120") or an
// inclusive range of two addresses of one family ("10.0.0.200-10.0.0.215"). Spaces around
// the dash are allowed. A CIDR must name its network: "10.0.0.200/28" is refused because it
// silently means 10.0.0.192-10.0.0.207.
//
// Special-purpose blocks that can never be a Service address (0.0.0.0/8 and ::, loopback,
// link-local, multicast, 240.0.0.0/4 with the broadcast address) are refused as a range's ends
// and in CIDRs, one rule per reason (rules.SpecialBlocks holds the same list).
//
// CEL cannot order two IPv6 addresses, so an IPv6 range whose start is after its end, and a
// range running across special addresses between ordinary ends (100.0.0.0-200.0.0.0), are
// reported by the controller on the pool's Ready condition instead.
//
// +kubebuilder:validation:MaxLength=100
// +kubebuilder:validation:XValidation:rule="isCIDR(self) || (self.split('-').size() == 2 && isIP(self.split('-')[0].trim()) && isIP(self.split('-')[1].trim()))",message="must be a CIDR such as 10.0.0.0/24 or 2001:db8::/120, or a range such as 10.0.0.200-10.0.0.215"
// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).ip() == cidr(self).masked().ip()",message="CIDR has host bits set: write its network address (10.0.0.192/28, not 10.0.0.200/28; 2001:db8::/64, not 2001:db8::1/64), or a range to start elsewhere"
// +kubebuilder:validation:XValidation:rule="!(self.split('-').size() == 2 && isIP(self.split('-')[0].trim()) && isIP(self.split('-')[1].trim())) || ip(self.split('-')[0].trim()).family() == ip(self.split('-')[1].trim()).family()",message="a range must not mix IPv4 and IPv6"
// +kubebuilder:validation:XValidation:rule="!(self.split('-').size() == 2 && isIP(self.split('-')[0].trim()) && isIP(self.split('-')[1].trim())) || ip(self.split('-')[0].trim()).family() != 4 || ip(self.split('-')[1].trim()).family() != 4 || ((int(self.split('-')[0].trim().split('.')[0]) * 256 + int(self.split('-')[0].trim().split('.')[1])) * 256 + int(self.split('-')[0].trim().split('.')[2])) * 256 + int(self.split('-')[0].trim().split('.')[3]) <= ((int(self.split('-')[1].trim().split('.')[0]) * 256 + int(self.split('-')[1].trim().split('.')[1])) * 256 + int(self.split('-')[1].trim().split('.')[2])) * 256 + int(self.split('-')[1].trim().split('.')[3])",messageExpression="'range start ' + self.split('-')[0].trim() + ' is after its end ' + self.split('-')[1].trim()"
// +kubebuilder:validation:XValidation:rule="['0.0.0.0/8', '::/128'].all(b, isCIDR(self) ? !cidr(self).containsIP(cidr(b).ip()) && !cidr(b).containsIP(cidr(self).ip()) : !(self.split('-').size() == 2 && isIP(self.split('-')[0].trim()) && isIP(self.split('-')[1].trim())) || !cidr(b).containsIP(self.split('-')[0].trim()) && !cidr(b).containsIP(self.split('-')[1].trim()))",message="0.0.0.0/8 and :: mean this host on this network (RFC 1122, RFC 4291) and can never be a Service address"
// +kubebuilder:validation:XValidation:rule="['127.0.0.0/8', '::1/128'].all(b, isCIDR(self) ? !cidr(self).containsIP(cidr(b).ip()) && !cidr(b).containsIP(cidr(self).ip()) : !(self.split('-').size() == 2 && isIP(self.split('-')[0].trim()) && isIP(self.split('-')[1].trim())) || !cidr(b).containsIP(self.split('-')[0].trim()) && !cidr(b).containsIP(self.split('-')[1].trim()))",message="127.0.0.0/8 and ::1 are loopback (RFC 1122, RFC 4291), reachable only inside each host, and can never be a Service address"
// +kubebuilder:validation:XValidation:rule="['169.254.0.0/16', 'fe80::/10'].all(b, isCIDR(self) ? !cidr(self).containsIP(cidr(b).ip()) && !cidr(b).containsIP(cidr(self).ip()) : !(self.split('-').size() == 2 && isIP(self.split('-')[0].trim()) && isIP(self.split('-')[1].trim())) || !cidr(b).containsIP(self.split('-')[0].trim()) && !cidr(b).containsIP(self.split('-')[1].trim()))",message="169.254.0.0/16 and fe80::/10 are link-local (RFC 3927, RFC 4291), never routed off their link, and can never be a Service address"
// +kubebuilder:validation:XValidation:rule="['224.0.0.0/4', 'ff00::/8'].all(b, isCIDR(self) ? !cidr(self).containsIP(cidr(b).ip()) && !cidr(b).containsIP(cidr(self).ip()) : !(self.split('-').size() == 2 && isIP(self.split('-')[0].trim()) && isIP(self.split('-')[1].trim())) || !cidr(b).containsIP(self.split('-')[0].trim()) && !cidr(b).containsIP(self.split('-')[1].trim()))",message="224.0.0.0/4 and ff00::/8 are multicast (RFC 5771, RFC 4291), groups rather than hosts, and can never be a Service address"
// +kubebuilder:validation:XValidation:rule="['240.0.0.0/4'].all(b, isCIDR(self) ? !cidr(self).containsIP(cidr(b).ip()) && !cidr(b).containsIP(cidr(self).ip()) : !(self.split('-').size() == 2 && isIP(self.split('-')[0].trim()) && isIP(self.split('-')[1].trim())) || !cidr(b).containsIP(self.split('-')[0].trim()) && !cidr(b).containsIP(self.split('-')[1].trim()))",message="240.0.0.0/4 is reserved for future use (RFC 1112) and ends with the broadcast address 255.255.255.255 (RFC 919): it can never be a Service address"
type AddressRange string

// ServiceAllocation narrows which Services a pool serves and in which order pools are tried.
type ServiceAllocation struct {
	// Priority orders the pools a Service may use: lower first. Pools without
	// serviceAllocation are tried after all pools that have one; ties go by pool name.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Priority int32 `json:"priority,omitempty"`

	// Namespaces whose Services may use this pool.
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +optional
	Namespaces []Name `json:"namespaces,omitempty"`

	// NamespaceSelectors select namespaces (by label) whose Services may use this pool.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	NamespaceSelectors []metav1.LabelSelector `json:"namespaceSelectors,omitempty"`

	// ServiceSelectors select Services (by label) that may use this pool.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	ServiceSelectors []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

// IPAddressPoolSpec lists the addresses Portico may hand to LoadBalancer Services.
type IPAddressPoolSpec struct {
	// Addresses are CIDRs or start-end ranges, IPv4 and IPv6 mixed freely across entries.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	Addresses []AddressRange `json:"addresses"`

	// AutoAssign lets Services that did not ask for this pool or for an address get one from
	// it. When false the pool only serves explicit requests.
	// +kubebuilder:default=true
	// +optional
	AutoAssign *bool `json:"autoAssign,omitempty"`

	// AvoidBuggyIPs skips addresses ending in .0 and .255, which some old clients and
	// routers mistake for network or broadcast addresses.
	// +optional
	AvoidBuggyIPs bool `json:"avoidBuggyIPs,omitempty"`

	// ServiceAllocation limits the pool to some namespaces or Services and sets its priority.
	// +optional
	ServiceAllocation *ServiceAllocation `json:"serviceAllocation,omitempty"`

	// AllowSharingAcrossNamespaces lets Services of different namespaces share one of the
	// pool's addresses when they carry the same sharing key (portico.dev/allow-shared-ip).
	// By default a sharing key joins only Services of one namespace, so a tenant cannot
	// attach its Service to another tenant's address by reusing its key.
	// +optional
	AllowSharingAcrossNamespaces bool `json:"allowSharingAcrossNamespaces,omitempty"`

	// ConflictProbing: Enabled (the default) lets the speakers probe the addresses this pool
	// hands out next and the controller hold back those a foreign host answers for
	// (status.inUse). Disabled: none of its addresses is probed, and no answer holds one back;
	// for a pool whose addresses nobody else on the LAN can hold, or a LAN whose answers cannot
	// be trusted.
	// +kubebuilder:default=Enabled
	// +optional
	ConflictProbing ConflictProbing `json:"conflictProbing,omitempty"`

	// AddressHold keeps the address a deleted Service let go for a Service of the same
	// namespace and name (or of its namespace and sharing key) for a while, so that one
	// deleted and created again (a Helm uninstall and install, an Argo CD replace, a namespace
	// restore) gets it back. Off by default: a held address is handed to nobody else, so holds
	// take pool space, and a small pool whose Services come and go can run out.
	// +optional
	AddressHold *AddressHold `json:"addressHold,omitempty"`
}

// AddressHold is how long a pool keeps a deleted Service's address for it.
type AddressHold struct {
	// Duration a released address stays held, from the moment its Service is gone: between
	// 1s and 168h (a week).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('168h')",message="addressHold.duration must be between 1s and 168h"
	Duration metav1.Duration `json:"duration"`
}

// The bounds of addressHold.duration, which its CEL rule enforces.
const (
	MinAddressHold = time.Second
	MaxAddressHold = 168 * time.Hour
)

// HoldFor is how long the pool holds a released address: 0 when it holds none, or when the
// duration is out of bounds (written while validation was relaxed; Ready says so).
func (p *IPAddressPool) HoldFor() time.Duration {
	if p.Spec.AddressHold == nil {
		return 0
	}
	if d := p.Spec.AddressHold.Duration.Duration; d >= MinAddressHold && d <= MaxAddressHold {
		return d
	}
	return 0
}

// ConflictProbing switches a pool's conflict probing on or off.
// +kubebuilder:validation:Enum=Enabled;Disabled
type ConflictProbing string

const (
	ConflictProbingEnabled  ConflictProbing = "Enabled"
	ConflictProbingDisabled ConflictProbing = "Disabled"
)

// ProbesConflicts says whether the pool's addresses are probed and their answers count: unless
// spec.conflictProbing is Disabled.
func (p *IPAddressPool) ProbesConflicts() bool {
	return p.Spec.ConflictProbing != ConflictProbingDisabled
}

// MaxPoolAddressesInUse caps a pool's status.inUse: the answers come from anyone on the LAN.
const MaxPoolAddressesInUse = 64

// AddressInUse is a pool address a foreign host answered for.
type AddressInUse struct {
	// +kubebuilder:validation:MaxLength=39
	Address string `json:"address"`
	// MAC that answered (the lowest, when several did).
	// +kubebuilder:validation:MaxLength=17
	MAC string `json:"mac"`
	// SeenBy is the node whose speaker heard the answer.
	// +kubebuilder:validation:MaxLength=253
	SeenBy string `json:"seenBy"`
	// Since is when that speaker first heard it.
	Since metav1.Time `json:"since"`
}

// MaxPoolHolds caps a pool's status.holds: past it, a released address is not held.
const MaxPoolHolds = 1024

// AddressHoldEntry is a pool address kept for a deleted Service: nobody else gets it until
// Until, except a Service of the same namespace that asks for it by address.
type AddressHoldEntry struct {
	// +kubebuilder:validation:MaxLength=39
	Address string `json:"address"`
	// Namespace and Name of the Service the address is kept for.
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// SharingKey the Service shared the address under (portico.dev/allow-shared-ip): another
	// Service of its namespace with that key may take the address back too.
	// +optional
	SharingKey string `json:"sharingKey,omitempty"`
	// Until is when the hold ends and the address is free again.
	Until metav1.Time `json:"until"`
}

// MaxPoolProxyAnswerers caps a pool's status.proxyAnswerers: the answers come from anyone on
// the LAN.
const MaxPoolProxyAnswerers = 8

// ProxyAnswerer is a MAC that answered the probes of more of a pool's addresses than one host
// plausibly holds: a router with proxy ARP or NDP, a Wi-Fi extender answering for its clients,
// or a host forging answers. Its answers hold no address back.
type ProxyAnswerer struct {
	// +kubebuilder:validation:MaxLength=17
	MAC string `json:"mac"`
	// Addresses counts the pool's probed addresses it answered for.
	// +kubebuilder:validation:Minimum=0
	Addresses int32 `json:"addresses"`
	// SeenBy is a node whose speaker heard it (the one that heard it first).
	// +kubebuilder:validation:MaxLength=253
	SeenBy string `json:"seenBy"`
	// Since is when that speaker first heard it.
	Since metav1.Time `json:"since"`
}

// IPAddressPoolStatus is written by the controller only.
type IPAddressPoolStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// AssignedIPv4 and AssignedIPv6 count addresses held by Services.
	// +optional
	AssignedIPv4 int64 `json:"assignedIPv4"`
	// +optional
	AssignedIPv6 int64 `json:"assignedIPv6"`

	// AvailableIPv4 and AvailableIPv6 count free addresses, in decimal: an IPv6 pool can
	// hold more addresses than an int64 counts.
	// +optional
	AvailableIPv4 string `json:"availableIPv4,omitempty"`
	// +optional
	AvailableIPv6 string `json:"availableIPv6,omitempty"`

	// Assigned and Available add up both families, for `kubectl get ipaddresspools`.
	// +optional
	Assigned int64 `json:"assigned"`
	// +optional
	Available string `json:"available,omitempty"`

	// Waiting counts Services that want this pool but have no address from it.
	// +optional
	Waiting int32 `json:"waiting"`

	// NextAddresses are the addresses the controller hands out next from this pool, lowest
	// first: at most 4 per family, none held by a Service and none listed in inUse. A speaker
	// probes them (and those in inUse) so that an address a foreign host already uses is found
	// before a Service gets it.
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=39
	// +listType=atomic
	// +optional
	NextAddresses []string `json:"nextAddresses,omitempty"`

	// InUse lists the pool's free addresses that a foreign host (a MAC no speaker answers with,
	// and not one of proxyAnswerers) answered for when a speaker probed them, at most 64. The
	// allocator skips them while they are listed; an address leaves the list when a later probe
	// round gets no answer, or when the speaker that heard it is no longer Ready or has not
	// reported a probe round for 3 minutes.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	InUse []AddressInUse `json:"inUse,omitempty"`

	// ProxyAnswerers lists the MACs that answered for more than 3 of the pool's probed
	// addresses (at most 8): their answers are ignored, so they hold no address back.
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +optional
	ProxyAnswerers []ProxyAnswerer `json:"proxyAnswerers,omitempty"`

	// Holds lists the addresses kept for deleted Services (spec.addressHold), at most 1024,
	// soonest to end first. They count neither as assigned nor as available.
	// +kubebuilder:validation:MaxItems=1024
	// +listType=atomic
	// +optional
	Holds []AddressHoldEntry `json:"holds,omitempty"`

	// Conditions: Ready, Overlapping, Exhausted, OrphanedIPs, AddressesInUse.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// IPAddressPool is a set of addresses Portico assigns to LoadBalancer Services.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=portico
// +kubebuilder:printcolumn:name="Addresses",type=string,JSONPath=`.spec.addresses`
// +kubebuilder:printcolumn:name="Assigned",type=integer,JSONPath=`.status.assigned`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.available`
// +kubebuilder:printcolumn:name="Waiting",type=integer,JSONPath=`.status.waiting`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IPAddressPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec IPAddressPoolSpec `json:"spec"`
	// +optional
	Status IPAddressPoolStatus `json:"status,omitempty"`
}

// IPAddressPoolList is a list of IPAddressPools.
//
// +kubebuilder:object:root=true
type IPAddressPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPAddressPool `json:"items"`
}

func init() {
	register(&IPAddressPool{}, &IPAddressPoolList{})
}

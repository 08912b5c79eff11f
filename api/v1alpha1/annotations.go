package v1alpha1

// Service annotations a user may set. MetalLB's spellings (metallb.io/* and the deprecated
// metallb.universe.tf/*) of the same three are honoured too, so Services move over unchanged;
// the Portico spelling wins when both are present.
const (
	// AnnotationLoadBalancerIPs requests addresses: a comma list, at most one per family.
	AnnotationLoadBalancerIPs = "portico.dev/loadBalancerIPs"
	// AnnotationAddressPool requests a pool by name.
	AnnotationAddressPool = "portico.dev/address-pool"
	// AnnotationAllowSharedIP is a sharing key: Services of one namespace with the same key
	// may share an address when their ports do not clash (Services of several namespaces
	// only in a pool with allowSharingAcrossNamespaces).
	AnnotationAllowSharedIP = "portico.dev/allow-shared-ip"

	// AnnotationAllocatedFromPool is written by the controller: the pool the address came from.
	AnnotationAllocatedFromPool = "portico.dev/allocated-from-pool"
	// AnnotationAllocatedSharingKey is written by the controller beside a shared address: the
	// sharing key it is held under. A restart that finds two Services of different keys listing
	// one address (a key edited while no controller led) gives it to the one whose key did not
	// change.
	AnnotationAllocatedSharingKey = "portico.dev/allocated-sharing-key"
)

// MetalLB's annotation spellings, in the order they are consulted after Portico's own.
var (
	MetalLBLoadBalancerIPs = []string{"metallb.io/loadBalancerIPs", "metallb.universe.tf/loadBalancerIPs"}
	MetalLBAddressPool     = []string{"metallb.io/address-pool", "metallb.universe.tf/address-pool"}
	MetalLBAllowSharedIP   = []string{"metallb.io/allow-shared-ip", "metallb.universe.tf/allow-shared-ip"}
)

// DefaultLoadBalancerClass is the spec.loadBalancerClass Portico handles besides no class.
const DefaultLoadBalancerClass = "portico.dev/lb"

// LabelExcludeFromExternalLoadBalancers keeps a node from announcing any address.
const LabelExcludeFromExternalLoadBalancers = "node.kubernetes.io/exclude-from-external-load-balancers"

// LabelBGPRouterID sets a node's BGP router ID (an IPv4 address in dotted-quad form, such as
// 10.255.0.11) where the node has no IPv4 InternalIP to take it from, or to pick another.
// A BGPPeer's spec.routerID still overrides it for that peer's sessions (docs/speaker-bgp.md,
// "Router IDs").
const LabelBGPRouterID = "portico.dev/bgp-router-id"

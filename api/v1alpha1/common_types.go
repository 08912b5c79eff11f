package v1alpha1

// Name is the name of another Kubernetes object (a pool, a peer, a namespace): a DNS-1123
// subdomain.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=253
// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
type Name string

// InterfaceName is a Linux network interface name.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=15
// +kubebuilder:validation:Pattern=`^[^\s/:]+$`
type InterfaceName string

// IPAddress is a single IPv4 or IPv6 address, without a zone.
//
// +kubebuilder:validation:MaxLength=45
// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IPv4 or IPv6 address"
type IPAddress string

package allocator

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// Family is an IP family.
type Family int

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// FamilyOf returns a's family.
func FamilyOf(a netip.Addr) Family {
	if a.Is4() {
		return IPv4
	}
	return IPv6
}

func (f Family) String() string { return fmt.Sprintf("IPv%d", int(f)) }

// DualStack is a Service's ipFamilyPolicy.
type DualStack int

const (
	SingleStack DualStack = iota
	PreferDualStack
	RequireDualStack
)

// Port is one port a Service exposes; two Services sharing an address must not both use one.
type Port struct {
	Protocol string
	Port     int32
}

func (p Port) String() string { return fmt.Sprintf("%s/%d", p.Protocol, p.Port) }

// Request is what one Service asks of the allocator, with every Kubernetes fact already
// evaluated by the caller.
type Request struct {
	// Service is "namespace/name"; the namespace bounds sharing and what messages may name.
	Service string
	// Families the Service wants, primary first (spec.ipFamilies); empty means IPv4.
	Families []Family
	// DualStack is the Service's ipFamilyPolicy.
	DualStack DualStack
	// IPs are requested addresses, at most one per family.
	IPs []netip.Addr
	// Pools are the requested pools (portico.dev/address-pool), at most one per family: each
	// address comes from the one holding its family. None: any pool that serves the Service.
	Pools []string
	// Selected names the pools with a serviceAllocation that selects this Service. Pools
	// without a serviceAllocation serve every Service.
	Selected []string
	// SharingKey lets Services with the same key share an address; "" means exclusive.
	SharingKey string
	// Ports the Service exposes.
	Ports []Port
	// Local is externalTrafficPolicy: Local; such Services share an address only with
	// Services that select the same pods.
	Local bool
	// Selector identifies the pods the Service selects (any canonical form).
	Selector string
	// Stale marks a hold, not a Service: addresses a status may still list. It is restored
	// beside any holder, whatever their key, and keeps the address taken once they all leave.
	Stale bool
}

// Reason says why an allocation failed: one of the IPAllocated condition's reasons, which the
// API defines (and documents) once.
type Reason string

const (
	NoMatchingPool          Reason = porticov1.ReasonNoMatchingPool
	PoolExhausted           Reason = porticov1.ReasonPoolExhausted
	RequestedIPInUse        Reason = porticov1.ReasonRequestedIPInUse
	RequestedIPNotInAnyPool Reason = porticov1.ReasonRequestedIPNotInAnyPool
	SharingConflict         Reason = porticov1.ReasonSharingConflict
	FamilyUnavailable       Reason = porticov1.ReasonFamilyUnavailable
	NotAllowedByPool        Reason = porticov1.ReasonNotAllowedByPool
	PoolsOfOneFamily        Reason = porticov1.ReasonPoolsOfOneFamily
)

// Error is a failed allocation: a reason and a message for a person.
type Error struct {
	Reason  Reason
	Message string
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Message }

func fail(reason Reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Assignment is what a Service holds.
type Assignment struct {
	IPs []netip.Addr
	// Pools are the pools the addresses belong to, one per address: a dual-stack Service may
	// take each family from another pool. "" for an address in no pool any more (orphaned).
	Pools []string
	// SharingKey the addresses are held under ("": not shared).
	SharingKey string
}

// Pool names the pools the addresses belong to, once each, in the addresses' order and joined
// by commas ("v4pool,v6pool"; pool names hold no comma): what allocated-from-pool says. ""
// when every address is orphaned.
func (a Assignment) Pool() string { return joinPools(a.Pools) }

func joinPools(pools []string) string {
	var names []string
	for _, p := range pools {
		if p != "" && !slices.Contains(names, p) {
			names = append(names, p)
		}
	}
	return strings.Join(names, ",")
}

// Orphaned reports whether an address is outside every pool.
func (a Assignment) Orphaned() bool { return slices.Contains(a.Pools, "") }

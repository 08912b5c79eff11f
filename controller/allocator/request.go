package allocator

import (
	"fmt"
	"net/netip"

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
	// Pool is a requested pool name, or "".
	Pool string
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
	// Pool the addresses belong to; "" when they are in no pool any more (orphaned).
	Pool string
	// SharingKey the addresses are held under ("": not shared).
	SharingKey string
}

// Orphaned reports whether the addresses are outside every pool.
func (a Assignment) Orphaned() bool { return len(a.IPs) > 0 && a.Pool == "" }

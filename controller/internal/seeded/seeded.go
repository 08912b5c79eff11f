// Package seeded holds the deliberately broken rules that the simulator's positive controls
// switch on (controller/sim): a checker that never fails proves nothing, so each invariant the
// simulator checks is shown to catch a controller that breaks it (docs/reliability.md names the
// seed that finds each). Nothing else can turn them on: the package is internal to controller/,
// and every controller that runs has them all off.
package seeded

// Bugs are the broken rules, each off unless set.
type Bugs struct {
	// OldConflictRule re-applies a write's addresses, after a conflict, to whatever is stored
	// then: the rule before the fix of issue 30 (decide.Writes.Rebase). Broken: one address on
	// two Services (with the lease fence off too, which the simulator does itself).
	OldConflictRule bool
	// RequestedOutsidePools gives a Service the address it asks for even when no pool holds
	// it (decide's allocate). Broken: an address from no pool.
	RequestedOutsidePools bool
	// Repack allocates a Service afresh at every decision, the lowest free address first
	// (decide's allocate). Broken: an address that changes though nobody edited the Service.
	Repack bool
	// NoRetryOnRelease does not wake the waiting Services when a decision frees an address
	// (decide.Service). Broken: a Service that waits for good while an address is free.
	NoRetryOnRelease bool
}

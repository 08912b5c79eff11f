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
	// two Services.
	OldConflictRule bool
}

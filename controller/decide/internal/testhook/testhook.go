// Package testhook reaches into package decide for its simulator (controller/decide/sim) and
// nobody else: Go lets only packages under controller/decide import it.
package testhook

// ReapplyAddressesOnConflict, set by package decide, switches a *decide.Writes to the conflict
// rule before the fix (re-apply the part, addresses included, on whatever is stored now), so
// the simulator can show that it finds the bug that rule had.
var ReapplyAddressesOnConflict func(writes any)

// Package locked holds a value that can be reached only with its lock held: the lock is
// enforced by the type, not by a comment asking callers to take it.
package locked

import "sync"

// Value is a T behind a mutex.
type Value[T any] struct {
	mu sync.Mutex
	v  T
}

// New puts v behind its lock.
func New[T any](v T) *Value[T] { return &Value[T]{v: v} }

// Do runs fn with the lock held, and releases it however fn ends: a panic (which
// controller-runtime recovers in a reconciler) must not leave every later caller waiting. fn
// must not keep the pointer it is given.
func (g *Value[T]) Do(fn func(*T)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fn(&g.v)
}

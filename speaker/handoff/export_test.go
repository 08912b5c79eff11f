package handoff

import "testing"

// SetBeforeRereading runs f between the table's read and each matching entry's second read,
// for the test's life.
func SetBeforeRereading(t *testing.T, f func()) {
	old := beforeRereading
	beforeRereading = f
	t.Cleanup(func() { beforeRereading = old })
}

// Package sample has a test of each outcome; sample.jsonl is its recorded `go test -json`.
package sample

import "testing"

func TestPasses(t *testing.T) { t.Log("said while passing") }

func TestFails(t *testing.T) {
	t.Log("context before the failure")
	t.Error("the failure")
}

func TestSkipsWithoutRoot(t *testing.T) { t.Skip("needs root (network namespaces)") }

func TestSubtests(t *testing.T) {
	t.Run("passes", func(t *testing.T) {})
	t.Run("fails", func(t *testing.T) { t.Fatal("a subtest's failure") })
	t.Run("skips", func(t *testing.T) { t.Skip("needs bird") })
}

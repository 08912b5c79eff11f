package broken

import "testing"

func TestDoesNotCompile(t *testing.T) { var n int = "not a number" }

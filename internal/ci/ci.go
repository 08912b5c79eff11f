// Package ci decides what a test does when this machine cannot run it: a developer's machine
// without root or a tool skips it, naming what is missing; CI (CI=true, which is root and
// installs the tools) fails it, so such a test is never skipped and counted as a pass there.
package ci

import (
	"os"
	"os/exec"
)

// T is what Require needs of a test (a *testing.T or *testing.B); the package does not import
// testing, so it links into no program.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	Skip(args ...any)
}

// Require stops t when why is not empty or one of tools is not on PATH.
func Require(t T, why string, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); why == "" && err != nil {
			why = "needs " + tool
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI must run this test: %s", why)
	}
	t.Skip(why)
}

package netlab

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/portico-lb/portico/internal/ci"
)

// RequireVRF is Require for a lab that makes Linux VRF devices: the kernel must have them
// (CONFIG_NET_VRF), which a throwaway namespace tries.
func RequireVRF(t ci.T, tools ...string) {
	t.Helper()
	ci.Require(t, Usable(), tools...)
	if why := vrfUsable(); why != "" {
		// The kernel's build, which no package installs: a skip even in CI, listed with its
		// reason in make test's summary, never counted as a pass.
		t.Skip(why)
	}
}

func vrfUsable() string {
	ns := fmt.Sprintf("ptvrf-probe-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return fmt.Sprintf("cannot make a namespace to try a VRF device: %v: %s", err, strings.TrimSpace(string(out)))
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	if out, err := exec.Command("ip", "-n", ns, "link", "add", "vrf-probe", "type", "vrf", "table", "10").CombinedOutput(); err != nil {
		return fmt.Sprintf("needs VRF devices, which this kernel cannot make (CONFIG_NET_VRF): %s", strings.TrimSpace(string(out)))
	}
	return ""
}

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/portico-lb/portico/internal/controlplane"
)

// speakerSecurity is what the speaker DaemonSet grants its container: the lab starts every
// speaker with exactly this, so the tests prove the manifest is enough.
type speakerSecurity struct {
	User, Group  int64
	Capabilities []string // Kubernetes names: NET_RAW, ...
	NoNewPrivs   bool
	// GoEnv holds the container's Go runtime settings (GOGC, GOMEMLIMIT, ...) as NAME=value:
	// the lab's speakers run with them, so the memory bench measures what a node runs.
	GoEnv []string
}

// capabilityBits are the capabilities a speaker manifest may name.
var capabilityBits = map[string]int{"NET_RAW": unix.CAP_NET_RAW, "NET_ADMIN": unix.CAP_NET_ADMIN,
	"NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE, "SYS_ADMIN": unix.CAP_SYS_ADMIN}

// daemonSetSecurity reads config/speaker/daemonset.yaml's speaker container's security context.
func daemonSetSecurity(t testing.TB) speakerSecurity { return containerSecurity(t, "speaker") }

// shippedDaemonSet is the speaker DaemonSet as config/speaker/daemonset.yaml ships it.
func shippedDaemonSet(t testing.TB) *appsv1.DaemonSet {
	root, err := controlplane.ModuleRoot()
	must(t, err)
	raw, err := os.ReadFile(filepath.Join(root, "config", "speaker", "daemonset.yaml"))
	must(t, err)
	var ds appsv1.DaemonSet
	must(t, yaml.UnmarshalStrict(raw, &ds))
	return &ds
}

// containerSecurity reads the security context of the speaker DaemonSet's container name
// (speaker, or bgp: the BGP side's own container).
func containerSecurity(t testing.TB, name string) speakerSecurity {
	ds := shippedDaemonSet(t)
	i := slices.IndexFunc(ds.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		t.Fatalf("the speaker DaemonSet has no container %s", name)
	}
	sc := ds.Spec.Template.Spec.Containers[i].SecurityContext
	if sc == nil || sc.RunAsUser == nil || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Fatalf("%s security context %+v: the lab needs runAsUser and drop [ALL]", name, sc)
	}
	s := speakerSecurity{User: *sc.RunAsUser, NoNewPrivs: sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation}
	if sc.RunAsGroup != nil {
		s.Group = *sc.RunAsGroup
	}
	for _, c := range sc.Capabilities.Add {
		if _, ok := capabilityBits[string(c)]; !ok {
			t.Fatalf("the lab does not know capability %s", c)
		}
		s.Capabilities = append(s.Capabilities, string(c))
	}
	for _, v := range ds.Spec.Template.Spec.Containers[i].Env {
		if strings.HasPrefix(v.Name, "GO") && v.ValueFrom == nil {
			s.GoEnv = append(s.GoEnv, v.Name+"="+v.Value)
		}
	}
	return s
}

// command prefixes bin and args with setpriv, which gives the process that user and those
// capabilities as a container runtime does: the bounding set limited to them, no inheritable
// or ambient ones, so root's exec keeps exactly them.
func (s speakerSecurity) command(bin string, args ...string) []string {
	caps := "-all"
	for _, c := range s.Capabilities {
		caps += ",+" + strings.ToLower(c)
	}
	cmd := []string{"setpriv", "--reuid", strconv.FormatInt(s.User, 10), "--regid", strconv.FormatInt(s.Group, 10),
		"--clear-groups", "--inh-caps", "-all", "--ambient-caps", "-all", "--bounding-set", caps}
	if s.NoNewPrivs {
		cmd = append(cmd, "--no-new-privs")
	}
	return append(append(cmd, "--", bin), args...)
}

// mask is the capability set as /proc/PID/status prints it.
func (s speakerSecurity) mask() uint64 {
	var m uint64
	for _, c := range s.Capabilities {
		m |= 1 << capabilityBits[c]
	}
	return m
}

// checkProcess fails unless process pid, once it runs bin (ip netns exec and setpriv exec it
// in turn), runs as the user with exactly the capabilities.
func (s speakerSecurity) checkProcess(t testing.TB, pid int, bin string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("pid %d runs %s", pid, bin), 10*time.Second, func() bool {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		return err == nil && exe == bin
	})
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	must(t, err)
	want := map[string]string{"Uid:": fmt.Sprint(s.User), "CapEff:": fmt.Sprintf("%016x", s.mask()),
		"CapPrm:": fmt.Sprintf("%016x", s.mask()), "CapBnd:": fmt.Sprintf("%016x", s.mask()), "CapAmb:": "0000000000000000"}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && want[f[0]] != "" && f[1] != want[f[0]] {
			t.Errorf("speaker pid %d: %s %s, want %s (the DaemonSet's)", pid, f[0], f[1], want[f[0]])
		}
	}
}

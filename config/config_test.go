package config_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/portico-lb/portico/internal/controlplane"
)

var cp *controlplane.ControlPlane

// auditLog records every request the apiserver answers, so the RBAC test can find any refused
// one (see rbac_test.go).
var auditLog string

// The control plane authorizes with RBAC (envtest's default; the admin is in system:masters).
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	controlplane.QuietLogs()
	dir, err := os.MkdirTemp("", "portico-config-audit-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	policy := filepath.Join(dir, "policy.yaml")
	auditLog = filepath.Join(dir, "audit.log")
	err = os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n"), 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cp, err = controlplane.Start(controlplane.Options{APIServerArgs: map[string]string{
		"authorization-mode": "RBAC",
		"audit-policy-file":  policy,
		"audit-log-path":     auditLog,
	}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	code := m.Run()
	if imageDir != "" {
		os.RemoveAll(imageDir)
	}
	if err := cp.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", err)
		code = max(code, 1)
	}
	return code
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	cmd := cp.KubectlCommand(context.Background(), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestSamplesAreAccepted applies config/samples with the real kubectl, as a user would, and
// checks what `kubectl get` prints for them.
func TestSamplesAreAccepted(t *testing.T) {
	out := kubectl(t, "apply", "-f", "samples/")
	for _, want := range []string{
		"ipaddresspool.portico.dev/home-lab created",
		"ipaddresspool.portico.dev/datacenter created",
		"l2advertisement.portico.dev/home-lab created",
		"bgppeer.portico.dev/tor-r1 created",
		"bgpadvertisement.portico.dev/datacenter created",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl apply output lacks %q:\n%s", want, out)
		}
	}

	pools := kubectl(t, "get", "ipaddresspools")
	t.Logf("kubectl get ipaddresspools:\n%s", pools)
	header := regexp.MustCompile(`^NAME\s+ADDRESSES\s+ASSIGNED\s+AVAILABLE\s+WAITING\s+AGE\n`)
	if !header.MatchString(pools) {
		t.Errorf("printer columns: want NAME ADDRESSES ASSIGNED AVAILABLE WAITING AGE, got:\n%s", pools)
	}
	if !regexp.MustCompile(`(?m)^home-lab\s+\["10\.0\.0\.200-10\.0\.0\.215"\]\s`).MatchString(pools) {
		t.Errorf("home-lab row does not show its addresses:\n%s", pools)
	}

	// The portico category lists every Portico object at once.
	all := kubectl(t, "get", "portico", "-o", "name")
	for _, want := range []string{"ipaddresspool.portico.dev/home-lab", "bgppeer.portico.dev/tor-r1"} {
		if !strings.Contains(all, want) {
			t.Errorf("kubectl get portico lacks %s:\n%s", want, all)
		}
	}

	// Applying again changes nothing: the samples are stable under the schema's defaults.
	again := kubectl(t, "apply", "-f", "samples/")
	if strings.Contains(again, "configured") {
		t.Errorf("re-applying the samples changed them:\n%s", again)
	}
}

// TestCRDKustomization: `kubectl apply -k config/crd` installs all five CRDs.
func TestCRDKustomization(t *testing.T) {
	out := kubectl(t, "kustomize", "crd")
	for _, crd := range []string{"ipaddresspools", "l2advertisements", "bgppeers", "bgpadvertisements", "speakers"} {
		if !strings.Contains(out, "name: "+crd+".portico.dev\n") {
			t.Errorf("kubectl kustomize config/crd lacks %s.portico.dev", crd)
		}
	}
}

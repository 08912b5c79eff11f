package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// The Prometheus operator's module, whose example/prometheus-operator-crd holds the CRDs of
// ServiceMonitor, PodMonitor and PrometheusRule that Portico's monitoring objects need
// (docs/monitoring.md). It comes through the Go module proxy, checked against its sum: no
// other download, and no dependency of any go.mod here (nothing imports it).
const (
	promOperatorModule  = "github.com/prometheus-operator/prometheus-operator"
	promOperatorVersion = "v0.85.0"
	promOperatorSum     = "h1:M5xLCLEoaW2IJfnuCwFzzpL+jSVQu3KGT84Pye+fW8s="
)

// PromOperatorCRDs are the operator's CRDs the monitoring objects use.
var PromOperatorCRDs = []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_podmonitors.yaml",
	"monitoring.coreos.com_prometheusrules.yaml"}

// PromOperatorCRDFiles downloads the operator's module into the module cache (`go mod
// download`, once; later calls read the cache) and returns the paths of PromOperatorCRDs in it.
func PromOperatorCRDFiles(ctx context.Context) ([]string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", promOperatorModule+"@"+promOperatorVersion)
	cmd.Dir = os.TempDir() // outside any module: the module is no dependency of one
	out, err := cmd.Output()
	var mod struct{ Dir, Sum, Error string }
	if jerr := json.Unmarshal(out, &mod); jerr != nil || mod.Error != "" || err != nil {
		return nil, fmt.Errorf("go mod download %s@%s: %v %s", promOperatorModule, promOperatorVersion, err, mod.Error)
	}
	if mod.Sum != promOperatorSum {
		return nil, fmt.Errorf("%s@%s has sum %s, want %s", promOperatorModule, promOperatorVersion, mod.Sum, promOperatorSum)
	}
	var files []string
	for _, name := range PromOperatorCRDs {
		path := filepath.Join(mod.Dir, "example", "prometheus-operator-crd", name)
		if _, err := os.Stat(path); err != nil {
			return nil, err
		}
		files = append(files, path)
	}
	return files, nil
}

// InstallPromOperatorCRDs applies PromOperatorCRDs to the apiserver (server-side) and waits
// until it serves them, so that Portico's monitoring objects can be applied next.
func (cp *ControlPlane) InstallPromOperatorCRDs(ctx context.Context) error {
	crds, err := PromOperatorCRDFiles(ctx)
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if err := cp.kubectlQuiet(ctx, "apply", "--server-side", "-f", crd); err != nil {
			return err
		}
	}
	return cp.kubectlQuiet(ctx, "wait", "--for", "condition=Established", "--timeout", "60s",
		"crd/servicemonitors.monitoring.coreos.com", "crd/podmonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")
}

// MonitoringObjects are what Portico's monitoring adds to its namespace (the chart's
// monitoring.enabled, config/with-monitoring), as `kubectl get -o name` names them.
var MonitoringObjects = []string{"servicemonitor.monitoring.coreos.com/portico-controller", "servicemonitor.monitoring.coreos.com/portico-speaker",
	"prometheusrule.monitoring.coreos.com/portico", "configmap/portico-dashboard"}

// MissingMonitoringObjects are the MonitoringObjects the apiserver does not hold in namespace.
func (cp *ControlPlane) MissingMonitoringObjects(ctx context.Context, namespace string) ([]string, error) {
	out, err := cp.KubectlCommand(ctx, "get", "servicemonitors,prometheusrules,configmaps", "-n", namespace, "-o", "name").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("kubectl get: %v\n%s", err, out)
	}
	have := strings.Fields(string(out))
	var missing []string
	for _, name := range MonitoringObjects {
		if !slices.Contains(have, name) {
			missing = append(missing, name)
		}
	}
	return missing, nil
}

// kubectlQuiet runs kubectl, its output only in the error.
func (cp *ControlPlane) kubectlQuiet(ctx context.Context, args ...string) error {
	if out, err := cp.KubectlCommand(ctx, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

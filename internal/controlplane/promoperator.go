package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

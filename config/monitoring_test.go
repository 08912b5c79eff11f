package config_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/portico-lb/portico/internal/ci"
)

const (
	monitoringRules = "monitoring/prometheusrule.yaml"
	alertTests      = "monitoring/testdata/alerts_test.yaml"
	monitoringDoc   = "../docs/monitoring.md"
)

// alertRule is one alerting rule of the PrometheusRule.
type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type ruleGroups struct {
	Groups []struct {
		Name  string      `json:"name"`
		Rules []alertRule `json:"rules"`
	} `json:"groups"`
}

// readRules returns the PrometheusRule's spec, as Prometheus reads a rules file, and its alerts.
func readRules(t *testing.T) ([]byte, []alertRule) {
	t.Helper()
	var obj struct {
		Spec ruleGroups `json:"spec"`
	}
	var raw struct {
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(read(t, monitoringRules), &obj); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(read(t, monitoringRules), &raw); err != nil {
		t.Fatal(err)
	}
	spec, err := yaml.Marshal(raw.Spec)
	if err != nil {
		t.Fatal(err)
	}
	var alerts []alertRule
	for _, g := range obj.Spec.Groups {
		alerts = append(alerts, g.Rules...)
	}
	if len(alerts) == 0 {
		t.Fatalf("%s has no alert", monitoringRules)
	}
	return spec, alerts
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAlertRulesPromtool: Prometheus's own promtool accepts the rules (check rules) and passes
// every case of monitoring/testdata/alerts_test.yaml (test rules), which holds, for each alert,
// a time it fires and a time it does not.
func TestAlertRulesPromtool(t *testing.T) {
	ci.Require(t, "", "promtool")
	spec, alerts := readRules(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), read(t, alertTests), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command("promtool", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	var cases struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(read(t, alertTests), &cases); err != nil {
		t.Fatal(err)
	}
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range cases.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, a := range alerts {
		if !firing[a.Alert] || !quiet[a.Alert] {
			t.Errorf("%s: %s has a case where it fires: %v, where it does not: %v; want both", alertTests, a.Alert, firing[a.Alert], quiet[a.Alert])
		}
	}
}

// TestAlertConventions: each alert follows kube-prometheus's conventions (a severity of
// critical, warning or info; summary, description and runbook_url), and its runbook_url points
// at a section of docs/monitoring.md that exists.
func TestAlertConventions(t *testing.T) {
	_, alerts := readRules(t)
	doc := string(read(t, monitoringDoc))
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(doc, -1) {
		anchors[githubAnchor(m[1])] = true
	}
	const runbooks = "https://github.com/portico-lb/portico/blob/main/docs/monitoring.md#"
	for _, a := range alerts {
		if !slices.Contains([]string{"critical", "warning", "info"}, a.Labels["severity"]) {
			t.Errorf("%s: severity %q", a.Alert, a.Labels["severity"])
		}
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if a.Annotations[k] == "" {
				t.Errorf("%s has no %s", a.Alert, k)
			}
		}
		anchor, ok := strings.CutPrefix(a.Annotations["runbook_url"], runbooks)
		if !ok || !anchors[anchor] || anchor != strings.ToLower(a.Alert) {
			t.Errorf("%s: runbook_url %s is not %s%s, a section of docs/monitoring.md", a.Alert, a.Annotations["runbook_url"], runbooks, strings.ToLower(a.Alert))
		}
	}
}

// githubAnchor is the fragment GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	s := strings.ToLower(strings.TrimSpace(heading))
	s = regexp.MustCompile("[^a-z0-9 _-]").ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

// TestMonitoringComponent: config/with-monitoring, rendered with the real kubectl, is the
// install manifests plus the two ServiceMonitors, the PrometheusRule and the dashboard's
// ConfigMap; with the Prometheus operator's CRDs (from its Go module) applied, the real
// apiserver accepts all of it, server-side with strict field validation.
func TestMonitoringComponent(t *testing.T) {
	objs := objectsOf(t, []byte(kubectl(t, "kustomize", "with-monitoring")))
	var added []string
	base := map[string]bool{}
	for _, u := range renderedObjects(t) {
		base[u.GetKind()+"/"+u.GetNamespace()+"/"+u.GetName()] = true
	}
	for _, u := range objs {
		key := u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
		if !base[key] {
			added = append(added, key)
		}
		delete(base, key)
	}
	slices.Sort(added)
	want := []string{"ConfigMap/portico-system/portico-dashboard", "PrometheusRule/portico-system/portico",
		"ServiceMonitor/portico-system/portico-controller", "ServiceMonitor/portico-system/portico-speaker"}
	if !slices.Equal(added, want) || len(base) > 0 {
		t.Errorf("config/with-monitoring adds %v to the manifests (want %v) and lacks %v", added, want, base)
	}
	for _, u := range objs {
		if u.GetKind() == "ConfigMap" && u.GetLabels()["grafana_dashboard"] != "1" {
			t.Errorf("the dashboard's ConfigMap has labels %v: kube-prometheus-stack's sidecar looks for grafana_dashboard=1", u.GetLabels())
		}
	}

	if err := cp.InstallPromOperatorCRDs(context.Background()); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "apply", "--server-side", "-k", "with-monitoring")
	if missing, err := cp.MissingMonitoringObjects(context.Background(), systemNamespace); err != nil || len(missing) > 0 {
		t.Errorf("not in the cluster after the apply: %v %v", missing, err)
	}
}

package chart_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/portico-lb/portico/internal/controlplane"
)

const monitoringDir = "../../config/monitoring"

var monitoringKeys = []string{"ConfigMap/" + namespace + "/portico-dashboard", "PrometheusRule/" + namespace + "/portico",
	"ServiceMonitor/" + namespace + "/portico-controller", "ServiceMonitor/" + namespace + "/portico-speaker"}

// TestMonitoringValues: by default the chart renders no monitoring object (and TestLint and
// TestChartMatchesManifests run with the defaults); monitoring.enabled renders the objects of
// config/monitoring, its rules and dashboard from copies identical to the component's files;
// monitoring.labels reach the ServiceMonitors and the PrometheusRule, and each part can be left
// out, the dashboard put in Grafana's namespace.
func TestMonitoringValues(t *testing.T) {
	for _, f := range []string{"prometheusrule.yaml", "dashboard.json"} {
		if !bytes.Equal(read(t, filepath.Join(chartDir, "files", f)), read(t, filepath.Join(monitoringDir, f))) {
			t.Errorf("charts/portico/files/%s differs from config/monitoring/%s: run `make generate`", f, f)
		}
	}
	for key := range render(t, nil) {
		if slices.Contains(monitoringKeys, key) {
			t.Errorf("monitoring is off by default, yet the chart renders %s", key)
		}
	}

	on := render(t, map[string]any{"monitoring": map[string]any{"enabled": true}})
	want := parse(t, "servicemonitors.yaml", read(t, filepath.Join(monitoringDir, "servicemonitors.yaml")))
	for key, o := range parse(t, "prometheusrule.yaml", read(t, filepath.Join(monitoringDir, "prometheusrule.yaml"))) {
		want[key] = o
	}
	for key, w := range want {
		for _, d := range diff(key, on[key], w) {
			t.Errorf("chart vs config/monitoring: %s", d)
		}
	}
	cm := on[monitoringKeys[0]]
	if cm == nil {
		t.Fatalf("monitoring.enabled renders no %s", monitoringKeys[0])
	}
	data := cm["data"].(map[string]any)["portico.json"]
	if data != strings.TrimSuffix(string(read(t, filepath.Join(monitoringDir, "dashboard.json"))), "\n") {
		t.Errorf("the dashboard ConfigMap's portico.json is not config/monitoring/dashboard.json")
	}
	if l := cm["metadata"].(map[string]any)["labels"].(map[string]any); l["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard ConfigMap's labels %v lack grafana_dashboard=1", l)
	}

	some := render(t, map[string]any{"monitoring": map[string]any{"enabled": true, "labels": map[string]any{"release": "kps"},
		"serviceMonitors": false, "dashboard": map[string]any{"namespace": "monitoring"}}})
	for key, o := range some {
		if strings.HasPrefix(key, "ServiceMonitor/") {
			t.Errorf("serviceMonitors false renders %s", key)
		}
		if strings.HasPrefix(key, "PrometheusRule/") && o["metadata"].(map[string]any)["labels"].(map[string]any)["release"] != "kps" {
			t.Errorf("%s lacks the label release=kps of monitoring.labels", key)
		}
	}
	if some["ConfigMap/monitoring/portico-dashboard"] == nil {
		t.Errorf("monitoring.dashboard.namespace=monitoring does not put the dashboard there")
	}
}

// TestMonitoringNamesRegisteredMetrics: every metric a rule or a dashboard panel queries
// (found by Prometheus's own PromQL parser) is one Portico's code registers, or one of the
// libraries' series docs/metrics.md names (controller-runtime's, client-go's), or Prometheus's
// own up. docs' TestMetricsDocumented checks the other way: every registered metric is in
// docs/metrics.md.
func TestMonitoringNamesRegisteredMetrics(t *testing.T) {
	registered := registeredMetrics(t)
	doc := string(read(t, "../../docs/metrics.md"))
	queries := monitoringQueries(t)
	for _, q := range queries {
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(q.expr)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		for _, name := range metricNames(expr) {
			switch {
			case strings.HasPrefix(name, "portico_"):
				if !registered[baseName(name, registered)] {
					t.Errorf("%s queries %s, which the code does not register", q.where, name)
				}
			case name == "up":
			case !strings.Contains(doc, "`"+name+"`"):
				t.Errorf("%s queries %s, which is neither Portico's nor a series docs/metrics.md names", q.where, name)
			}
		}
	}
	if len(queries) < 20 {
		t.Fatalf("only %d queries found in the rules and the dashboard", len(queries))
	}
}

type query struct{ where, expr string }

// monitoringQueries are every rule's expression and every dashboard panel's queries.
func monitoringQueries(t *testing.T) []query {
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct{ Alert, Expr string }
			}
		}
	}
	if err := yaml.Unmarshal(read(t, filepath.Join(monitoringDir, "prometheusrule.yaml")), &rule); err != nil {
		t.Fatal(err)
	}
	var out []query
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			out = append(out, query{"alert " + r.Alert, r.Expr})
		}
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(read(t, filepath.Join(monitoringDir, "dashboard.json")), &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			out = append(out, query{"panel " + p.Title, tg.Expr})
		}
	}
	return out
}

// metricNames are the metric names an expression selects.
func metricNames(expr parser.Expr) []string {
	var names []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && !slices.Contains(names, vs.Name) {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

// baseName is a histogram's name for one of its series (_bucket, _count, _sum).
func baseName(name string, registered map[string]bool) string {
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && registered[base] {
			return base
		}
	}
	return name
}

// registeredMetrics are the portico_ metrics the code registers: named in a collector's options
// or a Desc, and the process collector's series under a portico_ namespace (their names
// asked of client_golang's collector itself).
func registeredMetrics(t *testing.T) map[string]bool {
	named := regexp.MustCompile(`(?:Name:\s+|NewDesc\()"(portico_[a-z0-9_]+)"`)
	processNS := regexp.MustCompile(`NewProcessCollector\(collectors\.ProcessCollectorOpts\{Namespace:\s+"(portico_[a-z0-9_]+)"`)
	out := map[string]bool{}
	for _, dir := range []string{"../../controller", "../../speaker", "../../internal", "../../cmd"} {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src := read(t, path)
			for _, m := range named.FindAllSubmatch(src, -1) {
				out[string(m[1])] = true
			}
			for _, m := range processNS.FindAllSubmatch(src, -1) {
				for _, name := range descNames(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: string(m[1])})) {
					out[name] = true
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(out) < 40 {
		t.Fatalf("only %d portico_ metrics found in the code: the patterns are out of date", len(out))
	}
	return out
}

// descNames are the names of the series a collector describes.
func descNames(c prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	var names []string
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			names = append(names, m[1])
		}
	}
	return names
}

// TestMonitoringApplies: `helm template` with monitoring.enabled, applied with the real kubectl
// to a real apiserver that has the Prometheus operator's CRDs (from its Go module), is accepted
// whole, server-side with strict field validation: every field of the ServiceMonitors and the
// PrometheusRule is one the operator's schemas know.
func TestMonitoringApplies(t *testing.T) {
	controlplane.QuietLogs()
	helm := buildHelm(t)
	cp := controlplane.StartFor(t, controlplane.Options{})
	if err := cp.InstallPromOperatorCRDs(context.Background()); err != nil {
		t.Fatal(err)
	}
	kubectl(t, cp, "", "create", "namespace", namespace)
	kubectl(t, cp, helmTemplate(t, helm, "--set", "monitoring.enabled=true"), "apply", "--server-side", "-f", "-")
	if missing, err := cp.MissingMonitoringObjects(context.Background(), namespace); err != nil || len(missing) > 0 {
		t.Errorf("not in the cluster after the apply: %v %v", missing, err)
	}
}

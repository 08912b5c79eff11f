// Package chart tests Portico's Helm chart (charts/portico) with the real Helm libraries: the
// linter, the chart loader and the template engine. It is a module of its own so the main
// module does not carry Helm; `make test` runs it.
package chart_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "../../charts/portico"
	manifests = "../../config/manifests/portico.yaml"
	namespace = "portico-system"
)

// objects are rendered Kubernetes objects keyed by kind/namespace/name.
type objects map[string]map[string]any

// TestLint: helm lint finds nothing worse than advice, with the defaults and with every kind
// of object the values can create.
func TestLint(t *testing.T) {
	for _, vals := range []map[string]any{nil, values(t, "testdata/samples-values.yaml")} {
		l := lint.All(chartDir, vals, namespace, false)
		for _, m := range l.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("helm lint: %s", m)
			} else {
				t.Logf("helm lint: %s", m)
			}
		}
	}
}

// TestChartMatchesManifests: with its defaults the chart renders exactly the objects of
// config/manifests/portico.yaml (CRDs, RBAC, workloads with their security contexts,
// capabilities, args, probes, ports and env), except the Namespace, which `helm install
// --create-namespace` or the user makes.
// Only imagePullPolicy, which the chart sets, is left out of the comparison.
func TestChartMatchesManifests(t *testing.T) {
	chart := render(t, nil)
	kustomized := parse(t, manifests, read(t, manifests))
	delete(kustomized, "Namespace//"+namespace)
	for key, want := range kustomized {
		got, ok := chart[key]
		if !ok {
			t.Errorf("the chart has no %s", key)
			continue
		}
		for _, d := range diff(key, withoutPullPolicy(got), want) {
			t.Errorf("chart vs manifests: %s", d)
		}
	}
	for key := range chart {
		if _, ok := kustomized[key]; !ok {
			t.Errorf("the chart renders %s, which the manifests do not have", key)
		}
	}
}

// TestChartValuesMakeSamples: pools (with an L2Advertisement), BGP peers and advertisements
// from values are the objects of config/samples/, which the config tests apply to a real
// apiserver.
func TestChartValuesMakeSamples(t *testing.T) {
	got := render(t, values(t, "testdata/samples-values.yaml"))
	files, err := filepath.Glob("../../config/samples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples: %v", err)
	}
	for _, f := range files {
		for key, want := range parse(t, f, read(t, f)) {
			for _, d := range diff(key, got[key], want) {
				t.Errorf("values vs %s: %s", filepath.Base(f), d)
			}
		}
	}
}

// TestMemberlistSecret: by default the chart renders no Secret (a random key in a template is a
// new key on every `helm template`, TestTemplateTwiceKeepsOneKey); the speakers create
// portico-memberlist, so they may create Secrets, and get that one by name. With
// memberlist.existingSecret they get the named one, create nothing and may not.
func TestMemberlistSecret(t *testing.T) {
	for _, tc := range []struct {
		existing, secret string
		verbs            []any
		create           bool
	}{
		{"", "portico-memberlist", []any{"get portico-memberlist", "create"}, true},
		{"gossip-key", "gossip-key", []any{"get gossip-key"}, false},
	} {
		objs := render(t, map[string]any{"memberlist": map[string]any{"existingSecret": tc.existing}})
		for key := range objs {
			if strings.HasPrefix(key, "Secret/") {
				t.Errorf("existingSecret %q: renders %s", tc.existing, key)
			}
		}
		args := container(t, objs["DaemonSet/"+namespace+"/portico-speaker"])["args"].([]any)
		if !slices.Contains(args, any("--memberlist-secret=$(POD_NAMESPACE)/"+tc.secret)) {
			t.Errorf("existingSecret %q: speaker args %v do not read %s", tc.existing, args, tc.secret)
		}
		if got := slices.Contains(args, any("--memberlist-create-secret=true")); got != tc.create {
			t.Errorf("existingSecret %q: speakers create the Secret: %v, want %v", tc.existing, got, tc.create)
		}
		var verbs []any
		for _, r := range objs["Role/"+namespace+"/portico-speaker-secrets"]["rules"].([]any) {
			rule := r.(map[string]any)
			names, _ := rule["resourceNames"].([]any)
			for _, v := range rule["verbs"].([]any) {
				for _, name := range names {
					v = fmt.Sprint(v, " ", name)
				}
				verbs = append(verbs, v)
			}
		}
		if !reflect.DeepEqual(verbs, tc.verbs) {
			t.Errorf("existingSecret %q: speakers may %v Secrets, want %v", tc.existing, verbs, tc.verbs)
		}
	}
}

// TestImageValues: the image reference comes from image.repository and image.tag.
func TestImageValues(t *testing.T) {
	objs := render(t, map[string]any{"image": map[string]any{"repository": "registry.example/portico", "tag": "v9.9.9", "pullPolicy": "Never"}})
	for _, key := range []string{"Deployment/" + namespace + "/portico-controller", "DaemonSet/" + namespace + "/portico-speaker"} {
		c := container(t, objs[key])
		if c["image"] != "registry.example/portico:v9.9.9" || c["imagePullPolicy"] != "Never" {
			t.Errorf("%s runs %v (pull %v)", key, c["image"], c["imagePullPolicy"])
		}
	}
}

// render runs the real Helm engine over the chart as `helm install portico -n portico-system`
// would, CRDs included.
func render(t *testing.T, vals map[string]any) objects {
	t.Helper()
	files := renderFiles(t, vals)
	objs := objects{}
	add := func(name string, data []byte) {
		for key, o := range parse(t, name, data) {
			if _, dup := objs[key]; dup {
				t.Errorf("%s rendered twice", key)
			}
			objs[key] = o
		}
	}
	for name, data := range files {
		if strings.HasSuffix(name, ".yaml") {
			add(name, []byte(data))
		}
	}
	for _, crd := range load(t).CRDObjects() {
		add(crd.Filename, crd.File.Data)
	}
	return objs
}

func load(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// renderFiles runs the real Helm engine over the chart's templates, with no cluster to look
// anything up in (as `helm template` and GitOps tools do): file name → rendered text.
func renderFiles(t *testing.T, vals map[string]any) map[string]string {
	t.Helper()
	ch := load(t)
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "portico", Namespace: namespace, IsInstall: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func parse(t *testing.T, name string, data []byte) objects {
	t.Helper()
	objs := objects{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var o map[string]any
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if o == nil {
			continue
		}
		meta, _ := o["metadata"].(map[string]any)
		if clusterScoped[fmt.Sprint(o["kind"])] {
			delete(meta, "namespace")
		}
		objs[fmt.Sprintf("%s/%v/%v", o["kind"], orEmpty(meta["namespace"]), meta["name"])] = o
	}
}

// clusterScoped are the cluster-scoped kinds that kubectl's kustomize does not know as such: it
// gives them the kustomization's namespace, which the apiserver ignores.
var clusterScoped = map[string]bool{"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}

func orEmpty(v any) any {
	if v == nil {
		return ""
	}
	return v
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func values(t *testing.T, path string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal(read(t, path), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// container is a workload's first container (the speaker's pod has the bgp container second).
func container(t *testing.T, o map[string]any) map[string]any {
	t.Helper()
	return containers(t, o)[0]
}

func containers(t *testing.T, o map[string]any) []map[string]any {
	t.Helper()
	spec, _ := o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	cs, _ := spec["containers"].([]any)
	if len(cs) == 0 {
		t.Fatalf("%v: no container", o["metadata"])
	}
	out := make([]map[string]any, len(cs))
	for i, c := range cs {
		out[i] = c.(map[string]any)
	}
	return out
}

// withoutPullPolicy drops imagePullPolicy from a workload's containers.
func withoutPullPolicy(o map[string]any) map[string]any {
	spec, _ := o["spec"].(map[string]any)
	if tmpl, ok := spec["template"].(map[string]any); ok {
		for _, c := range tmpl["spec"].(map[string]any)["containers"].([]any) {
			delete(c.(map[string]any), "imagePullPolicy")
		}
	}
	return o
}

// diff names every path where got and want differ.
func diff(path string, got, want any) []string {
	gm, gok := got.(map[string]any)
	wm, wok := want.(map[string]any)
	if gok && wok {
		keys := map[string]bool{}
		for k := range gm {
			keys[k] = true
		}
		for k := range wm {
			keys[k] = true
		}
		var out []string
		for _, k := range sortedKeys(keys) {
			out = append(out, diff(path+"."+k, gm[k], wm[k])...)
		}
		return out
	}
	gl, gok := got.([]any)
	wl, wok := want.([]any)
	if gok && wok && len(gl) == len(wl) {
		var out []string
		for i := range gl {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), gl[i], wl[i])...)
		}
		return out
	}
	if !reflect.DeepEqual(got, want) {
		return []string{fmt.Sprintf("%s: got %v, want %v", path, got, want)}
	}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestForwardGuardValue: speaker.forwardGuard=false switches the guard and the L2 hand-off off
// and drops NET_ADMIN, which only they need; by default all are on.
func TestForwardGuardValue(t *testing.T) {
	for _, tc := range []struct {
		on      bool
		caps    []any
		handoff string
	}{
		{true, []any{"NET_RAW", "NET_ADMIN"}, "--l2-handoff-grace=10m"},
		{false, []any{"NET_RAW"}, "--l2-handoff-grace=0s"},
	} {
		c := container(t, render(t, map[string]any{"speaker": map[string]any{"forwardGuard": tc.on}})["DaemonSet/"+namespace+"/portico-speaker"])
		add := c["securityContext"].(map[string]any)["capabilities"].(map[string]any)["add"]
		if !reflect.DeepEqual(add, tc.caps) {
			t.Errorf("forwardGuard %v: capabilities %v, want %v", tc.on, add, tc.caps)
		}
		if arg := fmt.Sprintf("--forward-guard=%v", tc.on); !slices.Contains(c["args"].([]any), any(arg)) {
			t.Errorf("forwardGuard %v: args %v lack %s", tc.on, c["args"], arg)
		}
		if !slices.Contains(c["args"].([]any), any(tc.handoff)) {
			t.Errorf("forwardGuard %v: args %v lack %s", tc.on, c["args"], tc.handoff)
		}
	}
}

// TestSpeakerTuningValues: the speakers' balance settle time, drain grace, late flow-sharing
// round and hand-off mark bits are chart values that reach their flags; the BGP memory limit is
// the bgp container's.
func TestSpeakerTuningValues(t *testing.T) {
	cs := containers(t, render(t, map[string]any{"speaker": map[string]any{
		"l2BalanceSettle": "5m", "bgpDrainGrace": "0s", "bgpShareFlowsLate": "2s", "bgpMemoryLimitMiB": 300,
		"handoffMark": "0x1000", "handoffSlotMask": "0x0",
	}})["DaemonSet/"+namespace+"/portico-speaker"])
	for _, arg := range []string{"--l2-balance-settle=5m", "--bgp-drain-grace=0s", "--bgp-share-flows-late=2s", "--bgp-socket=/run/portico/bgp.sock",
		"--l2-handoff-mark=0x1000", "--handoff-slot-mask=0x0"} {
		if !slices.Contains(cs[0]["args"].([]any), any(arg)) {
			t.Errorf("args %v lack %s", cs[0]["args"], arg)
		}
	}
	if len(cs) != 2 || cs[1]["name"] != "bgp" || cs[1]["resources"].(map[string]any)["limits"].(map[string]any)["memory"] != "300Mi" {
		t.Errorf("the bgp container does not have the memory limit of 300 MiB: %v", cs[1:])
	}
}

package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/internal/workload"
)

var (
	update   = flag.Bool("update", false, "rewrite the golden files in testdata/ with the current output")
	describe = flag.Bool("describe", false, "also print `kubectl describe svc gitea` (for the docs)")
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { controlplane.Main(m, &cp) }

// TestPlugin sets the home lab up once and runs the subcommands on it.
func TestPlugin(t *testing.T) {
	homeLab(t)
	t.Run("golden", testGolden)
	t.Run("plan changes nothing", testPlanChangesNothing)
	t.Run("bad input", testBadInput)
}

// testGolden runs every subcommand on the README's home lab, with one mistake in each
// layer a user meets: gitea's selector says app=gittea, harbor's pods never become Ready,
// jellyfin asks for a pool that does not exist yet. The outputs are compared with
// testdata/*.golden (go test -update rewrites them).
func testGolden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"status", []string{"status"}},
		{"explain-gitea", []string{"explain", "svc/gitea"}},
		{"explain-argocd", []string{"explain", "svc/argocd", "-n", "default"}},
		{"explain-harbor", []string{"explain", "service/harbor"}},
		{"explain-jellyfin", []string{"explain", "jellyfin"}},
		{"plan", []string{"plan", "-f", "testdata/pools-next.yaml"}},
		{"plan-prune", []string{"plan", "--prune", "-f", "testdata/pools-next.yaml"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			got, err := run(tc.args...)
			if err != nil {
				t.Fatalf("%v: %v\n%s", tc.args, err, got)
			}
			compare(t, tc.golden, got)
		})
	}
	if *describe {
		out, err := cp.KubectlCommand(context.Background(), "describe", "svc", "gitea").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl describe: %v\n%s", err, out)
		}
		t.Logf("$ kubectl describe svc gitea\n%s", out)
		// The plugin as kubectl runs it: kubectl-portico on the PATH.
		bin := t.TempDir()
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		cmd := exec.Command(cp.Kubectl, "portico", "explain", "svc/gitea")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err = cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl portico explain: %v\n%s", err, out)
		}
		t.Logf("$ kubectl portico explain svc/gitea\n%s", out)
	}
}

// testPlanChangesNothing: plan leaves every object as it found it.
func testPlanChangesNothing(t *testing.T) {
	before := snapshot(t)
	if out, err := run("plan", "--prune", "-f", "testdata/pools-next.yaml"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if after := snapshot(t); after != before {
		t.Errorf("plan changed the cluster:\nbefore %s\nafter  %s", before, after)
	}
}

// testBadInput: wrong arguments get a specific error, not a stack or silence.
func testBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"explain", "deploy/gitea"}, `explain takes a Service (svc/NAME), not "deploy"`},
		{[]string{"explain", "svc/nope"}, `services "nope" not found`},
		{[]string{"plan", "-f", "testdata/not-pools.yaml"}, "document 1 is a v1 Service, not a portico.dev IPAddressPool"},
		{[]string{"plan"}, `required flag(s) "filename" not set`},
	} {
		out, err := run(tc.args...)
		if err == nil || !bytes.Contains([]byte(out), []byte(tc.want)) {
			t.Errorf("%v: err %v, output %q; want an error saying %q", tc.args, err, out, tc.want)
		}
	}
}

func run(args ...string) (string, error) {
	var out bytes.Buffer
	root := newRoot()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"--kubeconfig", cp.Kubeconfig}, args...))
	err := root.Execute()
	return out.String(), err
}

func compare(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// homeLab sets the scenario up: the controller, the home-lab pool and
// its L2Advertisement, the four Services with their pods and EndpointSlices, and two nodes'
// Speaker reports.
func homeLab(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c := cp.Client
	t.Cleanup(func() { // so -count=N starts from an empty cluster
		for _, del := range []struct {
			obj  client.Object
			opts []client.DeleteAllOfOption
		}{
			{&corev1.Pod{}, []client.DeleteAllOfOption{client.InNamespace("default"), client.GracePeriodSeconds(0)}},
			{&discoveryv1.EndpointSlice{}, []client.DeleteAllOfOption{client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelManagedBy: workload.ManagedBy}}},
			{&porticov1.Speaker{}, nil},
			{&porticov1.IPAddressPool{}, nil},
			{&porticov1.L2Advertisement{}, nil},
		} {
			if err := c.DeleteAllOf(ctx, del.obj, del.opts...); err != nil {
				t.Error(err)
			}
		}
	})
	startController(t)
	apply(t, "../../config/samples/ipaddresspool-home-lab.yaml", "../../config/samples/l2advertisement-home-lab.yaml")
	// A spare pool that serves only explicit requests; plan --prune deletes it.
	spare := &porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "spare"},
		Spec: porticov1.IPAddressPoolSpec{Addresses: []porticov1.AddressRange{"10.0.2.0/30"}, AutoAssign: ptr.To(false)}}
	if err := c.Create(ctx, spare); err != nil {
		t.Fatal(err)
	}
	for _, pool := range []string{"home-lab", "spare"} {
		waitFor(t, "pool "+pool+" Ready", func() bool {
			var p porticov1.IPAddressPool
			return c.Get(ctx, client.ObjectKey{Name: pool}, &p) == nil && meta.IsStatusConditionTrue(p.Status.Conditions, porticov1.ConditionReady)
		})
	}

	// The nodes' speakers run before any Service exists.
	speaker(t, "worker-1", "02:00:00:00:00:01", nil, nil)
	speaker(t, "worker-2", "02:00:00:00:00:02", nil, nil)
	pods := []workload.Pod{
		{Name: "gitea-0", Labels: map[string]string{"app": "gitea"}, Node: "worker-1", IP: "10.244.1.10", Ready: true},
		{Name: "gitea-1", Labels: map[string]string{"app": "gitea"}, Node: "worker-2", IP: "10.244.2.10", Ready: true},
		{Name: "gitea-2", Labels: map[string]string{"app": "gitea"}, Node: "worker-2", IP: "10.244.2.11", Ready: true},
		{Name: "argocd-0", Labels: map[string]string{"app": "argocd"}, Node: "worker-1", IP: "10.244.1.20", Ready: true},
		{Name: "harbor-0", Labels: map[string]string{"app": "harbor"}, Node: "worker-1", IP: "10.244.1.30", Ready: false},
		{Name: "harbor-1", Labels: map[string]string{"app": "harbor"}, Node: "worker-2", IP: "10.244.2.30", Ready: false},
		{Name: "grafana-0", Labels: map[string]string{"app": "grafana"}, Node: "worker-2", IP: "10.244.2.40", Ready: true},
	}
	for _, p := range pods {
		if _, err := workload.Run(ctx, c, "default", p); err != nil {
			t.Fatal(err)
		}
	}
	// Created one after another, as in the README: .200, .201, .202, .203.
	services := []struct{ name, app, pool string }{
		{"gitea", "gittea", ""}, // the typo
		{"argocd", "argocd", ""},
		{"harbor", "harbor", ""},
		{"grafana", "grafana", ""},
		{"jellyfin", "jellyfin", "media"}, // a pool that does not exist yet
	}
	for i, s := range services {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: s.name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": s.app},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(3000)}}},
		}
		if s.pool != "" {
			svc.Annotations = map[string]string{porticov1.AnnotationAddressPool: s.pool}
		}
		if err := c.Create(ctx, svc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(ctx, svc) })
		if err := workload.SyncSlice(ctx, c, svc); err != nil {
			t.Fatal(err)
		}
		if s.pool == "" {
			waitFor(t, fmt.Sprintf("%s at 10.0.0.%d", s.name, 200+i), func() bool {
				var got corev1.Service
				return c.Get(ctx, client.ObjectKeyFromObject(svc), &got) == nil && len(got.Status.LoadBalancer.Ingress) == 1 &&
					got.Status.LoadBalancer.Ingress[0].IP == fmt.Sprintf("10.0.0.%d", 200+i)
			})
		}
	}

	// What the speakers on two nodes report, as the owner rule elects them
	// (rules.L2EligibilityOf): worker-1 answers for gitea, argocd and grafana, worker-2 for
	// harbor, and each probed the other's addresses.
	speaker(t, "worker-1", "02:00:00:00:00:01", []porticov1.Announcement{
		{IP: "10.0.0.200", Service: "default/gitea", Protocol: porticov1.ProtocolL2, Interfaces: []string{"eth0"}},
		{IP: "10.0.0.201", Service: "default/argocd", Protocol: porticov1.ProtocolL2, Interfaces: []string{"eth0"}},
		{IP: "10.0.0.203", Service: "default/grafana", Protocol: porticov1.ProtocolL2, Interfaces: []string{"eth0"}},
	}, []porticov1.SelfCheck{{IP: "10.0.0.202", MACs: []string{"02:00:00:00:00:02"}}})
	speaker(t, "worker-2", "02:00:00:00:00:02", []porticov1.Announcement{
		{IP: "10.0.0.202", Service: "default/harbor", Protocol: porticov1.ProtocolL2, Interfaces: []string{"eth0"}},
	}, []porticov1.SelfCheck{{IP: "10.0.0.200", MACs: []string{"02:00:00:00:00:01"}}, {IP: "10.0.0.201", MACs: []string{"02:00:00:00:00:01"}},
		{IP: "10.0.0.203", MACs: []string{"02:00:00:00:00:01"}}})

	wantReason := map[string]string{"gitea": porticov1.ReasonNoEndpoints, "argocd": porticov1.ReasonEndpointsReady,
		"harbor": porticov1.ReasonNoReadyEndpoints, "grafana": porticov1.ReasonEndpointsReady, "jellyfin": porticov1.ReasonNoEndpoints}
	for name, reason := range wantReason {
		waitFor(t, name+" EndpointsReady "+reason, func() bool {
			var got corev1.Service
			if c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &got) != nil {
				return false
			}
			e := meta.FindStatusCondition(got.Status.Conditions, porticov1.ConditionEndpointsReady)
			a := meta.FindStatusCondition(got.Status.Conditions, porticov1.ConditionAnnounced)
			r := meta.FindStatusCondition(got.Status.Conditions, porticov1.ConditionReachable)
			announced := a != nil && r != nil && (a.Status == metav1.ConditionTrue && r.Status == metav1.ConditionTrue || name == "jellyfin")
			return e != nil && e.Reason == reason && announced && meta.FindStatusCondition(got.Status.Conditions, porticov1.ConditionIPAllocated) != nil
		})
	}
	waitFor(t, "pool home-lab counts 4 assigned", func() bool {
		var p porticov1.IPAddressPool
		return c.Get(ctx, client.ObjectKey{Name: "home-lab"}, &p) == nil && p.Status.Assigned == 4
	})

	// The home router already uses .204, the pool's next address: worker-1's probe heard it.
	// A Wi-Fi extender (52:54:00:ab:cd:ef) answers worker-2's probes for every address it
	// asks about: a proxy answerer, which holds nothing back.
	w1 := &porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}}
	if err := c.Get(ctx, client.ObjectKeyFromObject(w1), w1); err != nil {
		t.Fatal(err)
	}
	since := metav1.NewTime(time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC))
	probed := metav1.Now()
	w1.Status.ForeignAnswers = []porticov1.ForeignAnswer{{IP: "10.0.0.204", MAC: "52:54:00:12:34:56", Interface: "eth0", Since: since}}
	w1.Status.ProbedAt = &probed
	if err := c.Status().Update(ctx, w1); err != nil {
		t.Fatal(err)
	}
	w2 := &porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: "worker-2"}}
	if err := c.Get(ctx, client.ObjectKeyFromObject(w2), w2); err != nil {
		t.Fatal(err)
	}
	for _, ip := range []string{"10.0.0.205", "10.0.0.206", "10.0.0.207", "10.0.0.208"} {
		w2.Status.ForeignAnswers = append(w2.Status.ForeignAnswers, porticov1.ForeignAnswer{IP: ip, MAC: "52:54:00:ab:cd:ef", Interface: "eth0", Since: since})
	}
	w2.Status.ProbedAt = &probed
	if err := c.Status().Update(ctx, w2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pool home-lab lists 10.0.0.204 in use and the extender as a proxy answerer", func() bool {
		var p porticov1.IPAddressPool
		return c.Get(ctx, client.ObjectKey{Name: "home-lab"}, &p) == nil && len(p.Status.InUse) == 1 && len(p.Status.ProxyAnswerers) == 1 &&
			meta.IsStatusConditionTrue(p.Status.Conditions, porticov1.ConditionAddressesInUse)
	})
}

// speaker writes what a node's speaker reports; it runs before the Services exist, as in a
// cluster, so it is created on the first call.
func speaker(t *testing.T, node, mac string, ann []porticov1.Announcement, checks []porticov1.SelfCheck) {
	t.Helper()
	s := &porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(s), s); apierrors.IsNotFound(err) {
		if err := cp.Client.Create(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
		if err := cp.Client.Create(context.Background(), n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cp.Client.Delete(context.Background(), n) })
	} else if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	for i := range checks {
		checks[i].Time = now
	}
	s.Status = porticov1.SpeakerStatus{
		Announcements: ann, L2Announcements: int32(len(ann)), SelfChecks: checks, HardwareAddrs: []string{mac},
		Conditions: []metav1.Condition{{Type: porticov1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Running",
			Message: "answering for its addresses", LastTransitionTime: now}},
	}
	if err := cp.Client.Status().Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func apply(t *testing.T, files ...string) {
	t.Helper()
	args := []string{"apply"}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	if out, err := cp.KubectlCommand(context.Background(), args...).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

func startController(t *testing.T) {
	t.Helper()
	cp.RunManager(t, func(mgr ctrl.Manager) error { return controller.Setup(mgr, controller.Options{}) })
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return ok(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// snapshot prints the objects plan could touch, with their resourceVersions.
func snapshot(t *testing.T) string {
	t.Helper()
	var b bytes.Buffer
	var pools porticov1.IPAddressPoolList
	var svcs corev1.ServiceList
	if err := cp.Client.List(context.Background(), &pools); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.List(context.Background(), &svcs, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	for _, p := range pools.Items {
		fmt.Fprintf(&b, "pool/%s@%s ", p.Name, p.ResourceVersion)
	}
	for _, s := range svcs.Items {
		fmt.Fprintf(&b, "svc/%s@%s ", s.Name, s.ResourceVersion)
	}
	return b.String()
}

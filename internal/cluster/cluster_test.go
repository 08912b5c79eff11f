package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/ci"
	"github.com/portico-lb/portico/internal/cluster"
	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/internal/netlab"
)

func TestMain(m *testing.M) {
	controlplane.QuietLogs()
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// TestHomeLabOnRealNodes installs Portico on `make cluster`'s cluster exactly as the README
// says (the rendered manifests applied server-side, the memberlist Secret and the home-lab pool
// with kubectl), then runs the home lab (homeLab), then debugs it as a user would (kubectl
// logs, exec and port-forward), then deletes the controller leader's pod: no Service's
// EXTERNAL-IP may change (measure); then uninstalls it with `kubectl delete -f` after an
// address moved (uninstallLeavesNothing).
func TestHomeLabOnRealNodes(t *testing.T) {
	homeLab(t, installWithKubectl, func(e *labEnv) {
		debugsLikeAUser(e)
		r := measure(e, operationNamed(e, "leader-deleted"), gitea, 8)
		t.Logf("the controller leader's pod deleted: %d failed requests, longest gap %s; 8 keep-alive connections: %d failed requests, %d reset; moves %v",
			r.failed, r.gap, r.kaFailed, r.kaResets, r.moves)
		uninstallLeavesNothing(e, func() { uninstallWithKubectl(e) })
	})
}

// installWithKubectl is the README's install: the manifests alone (the first speaker creates
// the gossip key).
func installWithKubectl(e *labEnv) {
	e.kubectl("apply", "--server-side", "-f", e.built.Manifests)
	e.kubectl("apply", "-f", filepath.Join(e.root, "config/samples/ipaddresspool-home-lab.yaml"),
		"-f", filepath.Join(e.root, "config/samples/l2advertisement-home-lab.yaml"))
}

// TestHomeLabWithHelm installs Portico with the real Helm (built from hack/chart's module) from
// charts/portico, the image, the home-lab pool and monitoring.enabled as values, on a cluster
// that has the Prometheus operator's CRDs (as `make cluster` applies them); then runs the home
// lab (homeLab), checks the monitoring objects are in the cluster, then uninstalls it with
// `helm uninstall` after an address moved (uninstallLeavesNothing), monitoring objects included.
func TestHomeLabWithHelm(t *testing.T) {
	var helm func(args ...string)
	homeLab(t, func(e *labEnv) {
		helm = helmCommand(e)
		if err := e.c.CP.InstallPromOperatorCRDs(context.Background()); err != nil {
			t.Fatal(err)
		}
		values := filepath.Join(t.TempDir(), "values.yaml")
		repo, tag, _ := strings.Cut(testImage, ":")
		if err := os.WriteFile(values, []byte(fmt.Sprintf("image: {repository: %s, tag: %s}\n"+
			"pools:\n  - name: home-lab\n    addresses: [10.0.0.200-10.0.0.215]\n    l2Advertisement: {}\n"+
			"monitoring: {enabled: true}\n", repo, tag)), 0o644); err != nil {
			t.Fatal(err)
		}
		helm("install", "portico", filepath.Join(e.root, "charts", "portico"), "--namespace", "portico-system", "--create-namespace", "-f", values)
	}, func(e *labEnv) {
		monitoringObjects(e, true)
		uninstallLeavesNothing(e, func() { helm("uninstall", "portico", "--namespace", "portico-system", "--wait", "--timeout=3m") })
		monitoringObjects(e, false)
	})
}

// monitoringObjects checks the chart's monitoring objects are all in the cluster (want) or none.
func monitoringObjects(e *labEnv, want bool) {
	missing, err := e.c.CP.MissingMonitoringObjects(context.Background(), "portico-system")
	switch {
	case err != nil:
		e.t.Fatal(err)
	case want && len(missing) > 0:
		e.t.Errorf("the monitoring objects %v are not in the cluster after helm install", missing)
	case !want && len(missing) < len(controlplane.MonitoringObjects):
		e.t.Errorf("helm uninstall left monitoring objects: all but %v", missing)
	}
}

// helmCommand builds the helm command from hack/chart's module and returns a runner of it
// against the cluster, its cache, configuration and data in the test's directory.
func helmCommand(e *labEnv) func(args ...string) {
	dir := e.t.TempDir()
	helm := filepath.Join(dir, "helm")
	build := exec.Command("go", "-C", filepath.Join(e.root, "hack", "chart"), "build", "-o", helm, "helm.sh/helm/v3/cmd/helm")
	if out, err := build.CombinedOutput(); err != nil {
		e.t.Fatalf("building helm: %v\n%s", err, out)
	}
	return func(args ...string) {
		e.t.Helper()
		cmd := exec.Command(helm, append(args, "--kubeconfig", e.c.Kubeconfig)...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+dir, "HELM_CONFIG_HOME="+dir, "HELM_DATA_HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			e.t.Fatalf("helm %s: %v\n%s", args[0], err, out)
		}
	}
}

// testImage is the reference Portico's image is built and imported under.
const testImage = "portico.local/portico:e2e"

// The images and manifests, built once for the package's tests.
var (
	buildOnce sync.Once
	built     cluster.Built
	buildErr  error
	buildDir  string
)

// labEnv is a running cluster for one test.
type labEnv struct {
	t     testing.TB
	c     *cluster.Cluster
	root  string
	built cluster.Built

	observerHost netlab.Host // the LAN machine asking who answers (observer), once added
}

func (e *labEnv) kubectl(args ...string) string {
	e.t.Helper()
	out, err := e.tryKubectl(args...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// tryKubectl runs kubectl against the cluster; its error holds what kubectl printed.
func (e *labEnv) tryKubectl(args ...string) (string, error) {
	out, err := e.c.CP.KubectlCommand(context.Background(), args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// homeLab starts `make cluster`'s cluster, installs Portico with install, waits for the
// controller Deployment and the speaker DaemonSet to be Ready through their own probes,
// creates gitea, argocd, harbor and grafana as Deployments of the echo image with LoadBalancer
// Services (kubectl create and expose), and GETs each EXTERNAL-IP (.200 to .203) from a machine
// on the LAN; then runs then, when given. Stopping the cluster must leave nothing behind.
func homeLab(t testing.TB, install func(e *labEnv), then func(e *labEnv)) {
	root, err := controlplane.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	assets, err := controlplane.AssetsDir(root)
	if err != nil {
		t.Fatal(err)
	}
	ci.Require(t, cluster.Usable(assets), "openssl", "arping")
	ctx := context.Background()
	start := time.Now()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "portico-cluster-images-")
		if buildErr == nil {
			built, buildErr = cluster.BuildImages(ctx, root, filepath.Join(assets, "kubectl"), buildDir, testImage)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	t.Logf("images and manifests built in %s", time.Since(start).Round(time.Second))
	start = time.Now()
	c, err := cluster.Start(ctx, cluster.Options{Dir: t.TempDir(), Images: built.Archives, Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			c.Stop()
		}
	})
	defer func() {
		if t.Failed() {
			dumpLogs(t, c.Logs)
		}
	}()
	t.Logf("cluster with %d Ready nodes in %s", len(c.Nodes), time.Since(start).Round(time.Second))

	e := &labEnv{t: t, c: c, root: root, built: built}
	install(e)
	waitFor(t, "the controller Deployment and the speaker DaemonSet Ready", 4*time.Minute, func() (bool, string) {
		var d appsv1.Deployment
		var ds appsv1.DaemonSet
		if err := c.CP.Client.Get(ctx, client.ObjectKey{Namespace: "portico-system", Name: "portico-controller"}, &d); err != nil {
			return false, err.Error()
		}
		if err := c.CP.Client.Get(ctx, client.ObjectKey{Namespace: "portico-system", Name: "portico-speaker"}, &ds); err != nil {
			return false, err.Error()
		}
		state := fmt.Sprintf("controller %d/%d ready, speakers %d/%d ready", d.Status.ReadyReplicas, *d.Spec.Replicas,
			ds.Status.NumberReady, len(c.Nodes))
		return d.Status.ReadyReplicas == *d.Spec.Replicas && ds.Status.NumberReady == int32(len(c.Nodes)), state
	})
	t.Logf("Portico Ready %s after the cluster", time.Since(start).Round(time.Second))

	// One app at a time, each waiting for its address: the pool hands them out in order.
	get := netlab.HTTPClient(c.Client.NS, 2*time.Second)
	for i, app := range []string{"gitea", "argocd", "harbor", "grafana"} {
		e.kubectl("create", "deployment", app, "--image=portico.local/echo:lab", "--port=8080")
		e.kubectl("expose", "deployment", app, "--type=LoadBalancer", "--port=80", "--target-port=8080")
		want := fmt.Sprintf("10.0.0.%d", 200+i)
		waitFor(t, app+"'s EXTERNAL-IP", time.Minute, func() (bool, string) {
			var svc corev1.Service
			if err := c.CP.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: app}, &svc); err != nil {
				return false, err.Error()
			}
			ing := svc.Status.LoadBalancer.Ingress
			return len(ing) == 1 && ing[0].IP == want, fmt.Sprintf("ingress %v, want %s", ing, want)
		})
		waitFor(t, "an answer from "+app+" at http://"+want+"/ on the LAN", 2*time.Minute, func() (bool, string) {
			body, err := httpGet(get, "http://"+want+"/")
			return err == nil && strings.HasPrefix(body, app+"-"), fmt.Sprintf("%q, %v", body, err)
		})
		t.Logf("%s answers at %s", app, want)
	}
	t.Logf("home lab answering %s after the cluster", time.Since(start).Round(time.Second))
	answersOnLANOnly(t, c)
	noUntranslatedFlows(t, c)
	if then != nil {
		then(e)
	}

	c.Stop()
	stopped = true
	if left := c.Leftovers(); len(left) > 0 {
		t.Errorf("the stopped cluster left behind:\n%s", strings.Join(left, "\n"))
	}
}

func httpGet(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// waitFor polls cond every half second until it holds, failing the test after within with the
// last state cond described.
func waitFor(t testing.TB, what string, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, within, true,
		func(context.Context) (bool, error) {
			ok, state := cond()
			last = state
			return ok, nil
		})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last: %s)", what, err, last)
	}
}

// dumpLogs prints the tail of every process's log, and of every container's.
func dumpLogs(t testing.TB, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	pods, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), "*", "pod-logs", "*", "*", "*.log"))
	logs = append(logs, pods...)
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		t.Logf("--- %s (last lines):\n%s", filepath.Base(l), strings.Join(lines, "\n"))
	}
}

// noUntranslatedFlows checks that no node's connection tracking holds a flow to a home-lab
// address that nothing translated: the client above asked for each address from the moment it
// was assigned, before kube-proxy may have had its rule, and such a flow would swallow every
// later connection that reuses its source port (the speaker's forwarding guard, speaker/guard).
func noUntranslatedFlows(t testing.TB, c *cluster.Cluster) {
	t.Helper()
	for _, n := range c.Nodes {
		for i := range 4 {
			ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(200 + i)})
			flows, err := netlab.UntranslatedFlows(n.NS, ip)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range flows {
				t.Errorf("%s tracks a flow to %s that was not translated: %s", n.Name, ip, f)
			}
		}
		t.Logf("%s's forwarding guard: %d packet(s) dropped", n.Name, netlab.NFTCounted(n.NS, "inet", "portico"))
	}
}

// answersOnLANOnly: ARP for each VIP is answered by one node, from its LAN interface, and no
// speaker answers on cni0 or a pod's veth (each Speaker's status says why they are left out).
// A node with pods has both; answering there would hand the VIP to pods and bridges.
func answersOnLANOnly(t testing.TB, c *cluster.Cluster) {
	t.Helper()
	lan := map[string]string{} // MAC → node
	for _, n := range c.Nodes {
		lan[n.MAC.String()] = n.Name
	}
	for i := range 4 {
		ip := netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", 200+i))
		if macs := netlab.ARPing(c.Client.NS, ip, 2); len(macs) != 1 || lan[macs[0]] == "" {
			t.Errorf("ARP for %s answered by %v, want one node's LAN MAC %v", ip, macs, lan)
		}
	}
	var speakers porticov1.SpeakerList
	if err := c.CP.Client.List(context.Background(), &speakers); err != nil {
		t.Fatal(err)
	}
	podLinks := 0
	for _, s := range speakers.Items {
		for _, ifc := range s.Status.Interfaces {
			podLink := ifc.Name == "cni0" || strings.HasPrefix(ifc.Name, "veth")
			if podLink {
				podLinks++
			}
			if ifc.Answers && ifc.Name != "eth0" || podLink && ifc.Reason == "" {
				t.Errorf("speaker %s: interface %s answers=%v, reason %q", s.Name, ifc.Name, ifc.Answers, ifc.Reason)
			}
		}
	}
	if podLinks == 0 {
		t.Errorf("no Speaker lists cni0 or a pod's veth: nothing shows they are left out")
	}
}

// testWriter sends the cluster's progress lines to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

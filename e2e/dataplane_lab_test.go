package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/internal/netlab"
	"github.com/portico-lb/portico/internal/workload"
)

// dataplaneEnv carries the data-plane lab from the outer test process to the inner one, as
// labEnv does for the L2 lab.
const dataplaneEnv = "PORTICO_E2E_DATAPLANE_LAB"

// Every pod serves HTTP on these ports (netlab.ServePod: it answers "<pod name> <client address>").
const (
	podHTTPPort    = 3000
	podMetricsPort = 9090
)

// dataplanePool is the pool the real portico-controller allocates the lab's addresses from.
var dataplanePool = netip.MustParsePrefix("198.51.100.192/28")

// The BGP case: pool bgpPool is advertised to router r1 (198.51.100.3) only; the remote client
// sits behind r1 on remoteNet, off the nodes' LAN.
var (
	bgpPool   = netip.MustParsePrefix("203.0.113.0/28")
	remoteNet = netip.MustParsePrefix("10.0.9.0/24")
)

// dpLab is the L2 lab plus what a cluster's data plane needs: a pod network behind every node
// (bridge cni0 with the node's pod CIDR, routes to the other nodes' CIDRs), one pod per node,
// and the binaries of kube-proxy, kube-controller-manager and portico-controller. For the BGP
// case a router r1 on the LAN (l2Lab.Routers[0]) has a network of its own behind it holding
// the remote client; the nodes route that network via r1, as their default gateway would.
type dpLab struct {
	l2Lab
	Controller     string
	KubeProxy      string
	Pods           []labPod
	ClusterPodCIDR netip.Prefix
	Remote         labPod // the client behind r1 (Node names the router)
	ProxyMode      string // kube-proxy's --proxy-mode; empty: nftables (KubeProxyArgs)
}

// labPod is a network namespace behind its node's cni0, standing for a Pod of the cluster.
type labPod struct {
	Name string
	Node string
	NS   string
	IP   netip.Addr
}

// inDataplaneLab runs body inside the data-plane lab: the outer call builds the namespaces and
// binaries and re-executes the test in the control-plane namespace; the inner call starts the
// control plane, kube-controller-manager, portico-controller, and on every node a speaker and a
// kube-proxy, then creates the pods.
func inDataplaneLab[T testing.TB](t T, body func(t T, e *dpEnv)) {
	inDataplaneLabOf(t, "", body)
}

// inDataplaneLabOf is inDataplaneLab with kube-proxy in proxyMode ("iptables", "nftables"; ""
// is KubeProxyArgs' nftables).
func inDataplaneLabOf[T testing.TB](t T, proxyMode string, body func(t T, e *dpEnv)) {
	if raw := os.Getenv(dataplaneEnv); raw != "" {
		var lab dpLab
		if err := json.Unmarshal([]byte(raw), &lab); err != nil {
			t.Fatal(err)
		}
		body(t, startDataplane(t, &lab))
		return
	}
	netlab.Require(t, "arping", "nft", "bird", "birdc")
	parallel(t)
	root, err := controlplane.ModuleRoot()
	must(t, err)
	assets, err := controlplane.AssetsDir(root)
	must(t, err)
	lab := dpLab{Controller: buildBinary(t, "./cmd/portico-controller"),
		KubeProxy:      filepath.Join(assets, "kube-proxy"),
		ClusterPodCIDR: netip.MustParsePrefix("10.244.0.0/16"), ProxyMode: proxyMode}
	for _, bin := range []string{lab.KubeProxy, filepath.Join(assets, "kube-controller-manager")} {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%v: run `make controlplane` (it builds kube-proxy and kube-controller-manager from source)", err)
		}
	}
	l := netlab.New(t)
	lab.l2Lab = newL2Lab(t, l, 3)
	var hosts []netlab.Host
	var cidrs []netip.Prefix
	for i, n := range lab.Nodes {
		cidr := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i + 1), 0}), 24)
		l.AddPodNetwork(n.Host, cidr)
		pod := labPod{Name: "gitea-" + n.Name[5:], Node: n.Name, IP: netip.AddrFrom4([4]byte{10, 244, byte(i + 1), 10})}
		pod.NS = l.AddPod(n.Host, cidr, pod.Name, pod.IP)
		lab.Pods = append(lab.Pods, pod)
		hosts, cidrs = append(hosts, n.Host), append(cidrs, cidr)
	}
	l.RoutePods(hosts, cidrs)
	// r1's network is built as a node's pod network is: forwarding on, a bridge holding the
	// gateway address, and the client a namespace on it with its default route via r1.
	r1 := l.AddHost("r1", "02:00:00:00:01:01", "198.51.100.3/24", "2001:db8:1::3/64")
	lab.Routers = []netlab.Host{r1}
	l.AddPodNetwork(r1, remoteNet)
	lab.Remote = labPod{Name: "remote", Node: "r1", IP: netip.AddrFrom4([4]byte{10, 0, 9, 10})}
	lab.Remote.NS = l.AddPod(r1, remoteNet, lab.Remote.Name, lab.Remote.IP)
	for _, n := range lab.Nodes {
		l.MustRun("ip", "-n", n.NS, "route", "add", remoteNet.String(), "via", r1.IPv4.Addr().String())
	}
	reexecIn(t, lab.CP.NS, dataplaneEnv, lab)
}

// dpEnv is the inner side of the data-plane lab.
type dpEnv struct {
	*l2Env
	lab   *dpLab
	procs map[string]*os.Process // startProcess's, by name
}

func startDataplane(t testing.TB, lab *dpLab) *dpEnv {
	e := &dpEnv{l2Env: startEnv(t, &lab.l2Lab), lab: lab, procs: map[string]*os.Process{}}
	stopSlices, err := e.cp.StartEndpointSlices(logFile(t, "kube-controller-manager"))
	must(t, err)
	t.Cleanup(stopSlices)
	// The outer process built portico-controller; startController uses that binary.
	prebuilt := &buildResult{path: lab.Controller}
	prebuilt.once.Do(func() {})
	builds.Store("./cmd/portico-controller", prebuilt)
	startController(t, e.cp, logFile(t, "portico-controller"))
	for _, n := range lab.Nodes {
		args := controlplane.KubeProxyArgs(n.Name, e.kubeconfig, lab.ClusterPodCIDR)
		if lab.ProxyMode != "" {
			args = append(args, "--proxy-mode="+lab.ProxyMode) // the last one counts
		}
		e.startProcess("kube-proxy-"+n.Name, n.NS, lab.KubeProxy, args...)
	}
	ctx := context.Background()
	for _, p := range lab.Pods {
		stop, err := netlab.ServePod(p.NS, p.Name, podHTTPPort, podMetricsPort)
		must(t, err)
		t.Cleanup(stop)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: "default",
			Labels: map[string]string{"app": "gitea", "pod": p.Name}},
			Spec: corev1.PodSpec{NodeName: p.Node, Containers: []corev1.Container{{Name: "gitea", Image: "gitea/gitea",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: podHTTPPort}, {Name: "metrics", ContainerPort: podMetricsPort}}}}}}
		must(t, workload.CreateReady(ctx, e.c, pod, p.IP.String()))
	}
	pool := &v1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "lan"}}
	pool.Spec.Addresses = []v1alpha1.AddressRange{v1alpha1.AddressRange(dataplanePool.String())}
	must(t, e.c.Create(ctx, pool))
	ad := &v1alpha1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "lan"}}
	ad.Spec.IPAddressPools = []v1alpha1.Name{"lan"}
	must(t, e.c.Create(ctx, ad))
	// Every pod answers its node before any test starts.
	for _, p := range lab.Pods {
		url := fmt.Sprintf("http://%s:%d/", p.IP, podHTTPPort)
		waitFor(t, p.Name+" serves", 20*time.Second, func() bool {
			body, err := getFrom(e.node(p.Node).NS, url)
			return err == nil && strings.HasPrefix(body, p.Name+" ")
		})
	}
	return e
}

// startProcess runs bin in namespace ns ("" for the control plane's own) until the test ends,
// with its output in the lab's log directory (printed when the test fails).
func (e *dpEnv) startProcess(name, ns, bin string, args ...string) {
	logf, err := os.Create(filepath.Join(e.logs, name+".log"))
	must(e.t, err)
	cmd := exec.Command(bin, args...)
	if ns != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	must(e.t, cmd.Start())
	e.procs[name] = cmd.Process // ip netns exec execs bin: the same process
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	t := e.t
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("end of %s's log:\n%s", name, b)
		}
	})
}

// httpClient makes requests from the client namespace, each on a new connection.
func (e *dpEnv) httpClient(timeout time.Duration) *http.Client {
	return netlab.HTTPClient(e.Client.NS, timeout)
}

// get fetches url from the client namespace and returns the body.
func (e *dpEnv) get(url string) (string, error) { return getFrom(e.Client.NS, url) }

// getFrom fetches url from namespace ns and returns the body.
func getFrom(ns, url string) (string, error) {
	resp, err := netlab.HTTPClient(ns, 2*time.Second).Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(b), err
}

// podOn names the lab's pod on node.
func (e *dpEnv) podOn(node string) string {
	for _, p := range e.lab.Pods {
		if p.Node == node {
			return p.Name
		}
	}
	e.t.Fatalf("no pod on %s", node)
	return ""
}

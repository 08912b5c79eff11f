package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/internal/netlab"
	"github.com/portico-lb/portico/internal/workload"
)

// The root-mode demo's data plane (docs/dataplane.md has the picture): a LAN bridge 10.0.0.0/24
// with a client and three nodes, each node running portico-speaker and a real kube-proxy
// (nftables) in its network namespace, the four apps as pods behind the nodes, and
// kube-controller-manager turning the Ready pods into EndpointSlices.

// demoPod is one app's pod: where it runs and the port its Service targets.
type demoPod struct {
	app, node string
	ip        netip.Addr
	port      int
}

var demoPods = []demoPod{
	{"gitea", "node-a", netip.MustParseAddr("10.244.1.10"), 3000},
	{"argocd", "node-b", netip.MustParseAddr("10.244.2.10"), 8080},
	{"harbor", "node-c", netip.MustParseAddr("10.244.3.10"), 8443},
	{"grafana", "node-a", netip.MustParseAddr("10.244.1.11"), 3000},
}

// DataPlaneUsable reports why the demo cannot run its data plane here, or "" when it can:
// root, ip, nft, and kube-proxy and kube-controller-manager built by `make controlplane`.
func DataPlaneUsable(assets string) string {
	if why := netlab.Usable(); why != "" {
		return why
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return "needs nft (the nftables package)"
	}
	for _, b := range []string{"kube-proxy", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return "needs " + b + " (make controlplane)"
		}
	}
	return ""
}

// startDataPlane builds the lab and starts its processes; stop tears everything down. It
// returns the client's namespace.
func startDataPlane(ctx context.Context, cp *controlplane.ControlPlane, root, assets, logDir string) (clientNS string, stop func(), err error) {
	o := &netlab.Owner{}
	defer func() {
		if e := o.Recovered(recover()); e != nil {
			clientNS, stop, err = "", nil, e
		}
	}()
	fail := func(err error) {
		if err != nil {
			o.Fatalf("%v", err)
		}
	}
	speaker := filepath.Join(logDir, "portico-speaker")
	build := exec.CommandContext(ctx, "go", "build", "-tags", "grpcnotrace", "-o", speaker, "./cmd/portico-speaker")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		o.Fatalf("building portico-speaker: %v\n%s", err, out)
	}

	lab := netlab.New(o)
	client := lab.AddHost("client", "02:00:00:00:00:01", "10.0.0.1/24", "2001:db8:1::1/64")
	var nodes []netlab.Host
	var cidrs []netip.Prefix
	names := []string{"node-a", "node-b", "node-c"}
	for i, name := range names {
		nodes = append(nodes, lab.AddHost(name[5:], fmt.Sprintf("02:00:00:00:00:%02x", 0x0a+i),
			fmt.Sprintf("10.0.0.%d/24", 11+i), fmt.Sprintf("2001:db8:1::%d/64", 11+i)))
		cidrs = append(cidrs, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i + 1), 0}), 24))
		lab.AddPodNetwork(nodes[i], cidrs[i])
	}
	lab.RoutePods(nodes, cidrs)

	// Processes in the node namespaces reach the apiserver (on the host's loopback) through a
	// port forwarded from each namespace's own loopback: nothing is configured on the host.
	kubeconfig := filepath.Join(logDir, "node.kubeconfig")
	fail(cp.WriteKubeconfig(kubeconfig, "127.0.0.1", "6443"))
	apiserver, err := url.Parse(cp.Config.Host)
	fail(err)
	for _, n := range nodes {
		fail(netlab.Forward(o, n.NS, "127.0.0.1:6443", apiserver.Host))
	}

	start := func(name, ns, bin string, args ...string) {
		logf, err := os.Create(filepath.Join(logDir, name+".log"))
		fail(err)
		cmd := exec.Command(bin, args...)
		if ns != "" {
			cmd = exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		fail(cmd.Start())
		o.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
	}
	kcmLog, err := os.Create(filepath.Join(logDir, "kube-controller-manager.log"))
	fail(err)
	stopSlices, err := cp.StartEndpointSlices(kcmLog)
	fail(err)
	o.Cleanup(func() { stopSlices(); kcmLog.Close() })
	for i, name := range names {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
		fail(cp.Client.Create(ctx, node))
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodes[i].IPv4.Addr().String()}}
		fail(cp.Client.Status().Update(ctx, node))
		ip := nodes[i].IPv4.Addr().String()
		start("speaker-"+name, nodes[i].NS, speaker, "--node-name", name, "--kubeconfig", kubeconfig,
			"--memberlist-bind-address", ip, "--metrics-bind-address", "0")
		start("kube-proxy-"+name, nodes[i].NS, filepath.Join(assets, "kube-proxy"),
			controlplane.KubeProxyArgs(name, kubeconfig, netip.MustParsePrefix("10.244.0.0/16"))...)
	}
	for _, p := range demoPods {
		i := int(p.ip.As4()[2]) - 1
		name := fmt.Sprintf("%s-%d", p.app, p.ip.As4()[3])
		ns := lab.AddPod(nodes[i], cidrs[i], name, p.ip)
		closePod, err := netlab.ServePod(ns, name, p.port)
		fail(err)
		o.Cleanup(closePod)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": p.app}},
			Spec: corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{Name: p.app, Image: p.app,
				Ports: []corev1.ContainerPort{{ContainerPort: int32(p.port)}}}}}}
		fail(workload.CreateReady(ctx, cp.Client, pod, p.ip.String()))
	}
	return client.NS, o.Stop, nil
}

// curlEach fetches every Service's EXTERNAL-IP from the client namespace, as `curl` on another
// machine of the LAN would, and prints each answer (waiting up to a minute for the first).
func curlEach(ctx context.Context, out io.Writer, clientNS string, svcs []corev1.Service) error {
	hc := netlab.HTTPClient(clientNS, 2*time.Second)
	for _, s := range svcs {
		url := fmt.Sprintf("http://%s/", s.Status.LoadBalancer.Ingress[0].IP)
		if port := s.Spec.Ports[0].Port; port != 80 {
			url = fmt.Sprintf("http://%s:%d/", s.Status.LoadBalancer.Ingress[0].IP, port)
		}
		var body []byte
		var last error
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			resp, err := hc.Get(url)
			if err != nil {
				last = err
				return false, nil
			}
			defer resp.Body.Close()
			body, last = io.ReadAll(resp.Body)
			return last == nil && resp.StatusCode == http.StatusOK, nil
		})
		if err != nil {
			return fmt.Errorf("%s (%s) never answered from the client: %w", url, s.Name, errors.Join(err, last))
		}
		fmt.Fprintf(out, "\n$ curl %s   # from the client namespace on the LAN\n%s", url, body)
	}
	return nil
}

// Package cluster runs a real Kubernetes cluster on one Linux machine, as root, for `make
// cluster` and the end-to-end test that installs Portico as a user would: the control plane
// (internal/controlplane) with kube-controller-manager and kube-scheduler on the host, and
// three nodes, each a network namespace on one LAN bridge (internal/netlab) running its own
// containerd, kubelet and kube-proxy, with pods on a CNI bridge. Nothing is configured in the
// host's network namespace; the host reaches the apiserver on its loopback as usual, and
// everything on the LAN reaches it at the control plane's LAN address, forwarded there.
package cluster

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/internal/netlab"
)

// The LAN is the home lab's 10.0.0.0/24 (the home-lab pool is 10.0.0.200-10.0.0.215), inside
// the lab's namespaces only.
var (
	controlPlaneIP = netip.MustParsePrefix("10.0.0.2/24")
	clientIP       = netip.MustParsePrefix("10.0.0.1/24")
	// ClusterCIDR holds every node's pod network, 10.244.<n>.0/24 for the n-th node.
	ClusterCIDR = netip.MustParsePrefix("10.244.0.0/16")
	// NodeNames are the nodes, at 10.0.0.11, .12 and .13.
	NodeNames = []string{"node-a", "node-b", "node-c"}
)

// Binaries are what `make controlplane` builds that a cluster runs besides the control plane.
var Binaries = []string{"kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"}

// Usable reports why a cluster cannot run here, or "" when it can: root and the tools of the
// lab, containerd and runc, the CNI plugins, and the binaries in assets.
func Usable(assets string) string {
	if why := netlab.Usable(); why != "" {
		return why
	}
	for _, tool := range []string{"containerd", "ctr", "runc", "nsenter", "nft", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "needs " + tool
		}
	}
	if _, err := os.Stat(filepath.Join(CNIBinDir, "bridge")); err != nil {
		return "needs the CNI plugins in " + CNIBinDir + " (apt-get install containernetworking-plugins)"
	}
	for _, b := range Binaries {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return "needs " + b + " (make controlplane)"
		}
	}
	return ""
}

// Options say what the cluster holds.
type Options struct {
	// Dir receives the nodes' state and every process's log (Logs); the caller removes it.
	Dir string
	// Images are OCI archives imported into every node's containerd: no registry is reachable,
	// so every image a pod runs, the sandbox's "pause" included, comes from here.
	Images []string
	// Progress receives a line per step; nil discards them.
	Progress io.Writer
}

// Cluster is a running cluster. Stop it with Stop.
type Cluster struct {
	CP *controlplane.ControlPlane
	// Kubeconfig is an admin kubeconfig reaching the apiserver on the host's loopback.
	Kubeconfig string
	// Client is a machine on the LAN, for requests to EXTERNAL-IPs.
	Client netlab.Host
	Nodes  []*Node
	// Logs holds <process>.log for every process the cluster started.
	Logs string

	owner      *netlab.Owner
	progress   io.Writer
	began      time.Time
	dir        string
	lab        *netlab.Lab
	lanSwitch  string // the namespace of the LAN's bridge
	namespaces []string
	processes  []*process
}

// Start builds the lab, starts the control plane and the nodes, imports the images and waits
// until every node is Ready. On failure everything it made is removed again.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Dir, err = filepath.Abs(opts.Dir); err != nil {
		return nil, err
	}
	c = &Cluster{owner: &netlab.Owner{}, progress: opts.Progress, Logs: filepath.Join(opts.Dir, "logs"), began: time.Now(),
		dir: opts.Dir}
	if c.progress == nil {
		c.progress = io.Discard
	}
	defer func() {
		if e := c.owner.Recovered(recover()); e != nil {
			c, err = nil, e
		}
	}()
	c.must(os.MkdirAll(c.Logs, 0o755))
	c.removeCreatedHostPaths()
	c.owner.Cleanup(restoreSysctls())
	lab := netlab.New(c.owner)
	cpHost := lab.AddHost("cp", "02:00:00:00:00:02", controlPlaneIP.String(), "2001:db8:1::2/64")
	c.Client = lab.AddHost("client", "02:00:00:00:00:01", clientIP.String(), "2001:db8:1::1/64")
	for i, name := range NodeNames {
		h := lab.AddHost(name[5:], fmt.Sprintf("02:00:00:00:00:%02x", 0x0a+i), fmt.Sprintf("10.0.0.%d/24", 11+i),
			fmt.Sprintf("2001:db8:1::%d/64", 11+i))
		c.Nodes = append(c.Nodes, &Node{Name: name, Host: h,
			PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i + 1), 0}), 24)})
	}
	c.lab, c.lanSwitch = lab, lab.Switch
	c.namespaces = append(c.namespaces, lab.Switch, cpHost.NS, c.Client.NS)
	for _, n := range c.Nodes {
		c.namespaces = append(c.namespaces, n.NS)
	}
	c.routePods(lab, cpHost)
	c.startControlPlane(cpHost)
	for _, n := range c.Nodes {
		c.startNode(n, opts.Images)
	}
	c.must(c.waitNodesReady(ctx, 5*time.Minute))
	c.stepf("%d nodes Ready", len(c.Nodes))
	return c, nil
}

// Stop stops every process and removes every namespace, mount and cgroup the cluster made.
func (c *Cluster) Stop() { c.owner.Stop() }

// Leftovers lists what a stopped cluster left behind: processes still running (its own, and
// any naming its directory, such as a container's shim), network
// namespaces, mounts under its directory, cgroups. Empty after Stop.
func (c *Cluster) Leftovers() []string {
	var left []string
	for _, p := range c.processes {
		if !p.exited() {
			left = append(left, fmt.Sprintf("process %d (%s)", p.cmd.Process.Pid, p.cmd.Path))
		}
	}
	left = append(left, processesNaming(c.dir)...)
	for _, ns := range c.namespaces {
		if _, err := os.Stat("/var/run/netns/" + ns); err == nil {
			left = append(left, "network namespace "+ns)
		}
	}
	for _, m := range mountsUnder(c.dir) {
		left = append(left, "mount "+m)
	}
	for _, n := range c.Nodes {
		for _, h := range cgroupHierarchies() {
			if _, err := os.Stat(filepath.Join(h, n.cgroupRoot)); err == nil {
				left = append(left, "cgroup "+filepath.Join(h, n.cgroupRoot))
			}
		}
	}
	return left
}

func (c *Cluster) must(err error) {
	if err != nil {
		c.owner.Fatalf("%v", err)
	}
}

func (c *Cluster) stepf(format string, args ...any) {
	fmt.Fprintf(c.progress, "cluster: [%5.1fs] %s\n", time.Since(c.began).Seconds(), fmt.Sprintf(format, args...))
}

// sharedHostPaths are where a kubelet and containerd's CNI write whatever their configuration
// says: the device plugins' socket directory is fixed, and so is the CNI result cache.
var sharedHostPaths = []string{"/var/lib/kubelet", "/var/lib/cni"}

// removeCreatedHostPaths removes at cleanup those of sharedHostPaths that do not exist yet.
func (c *Cluster) removeCreatedHostPaths() {
	for _, p := range sharedHostPaths {
		if _, err := os.Stat(p); os.IsNotExist(err) {
			c.owner.Cleanup(func() { _ = os.RemoveAll(p) })
		}
	}
}

// routePods makes the pod networks one flat network without encapsulation: every node routes
// the others' pod CIDRs to them over the LAN, and so does the control plane's namespace, where
// pods' requests to the apiserver arrive with their own addresses.
func (c *Cluster) routePods(lab *netlab.Lab, cp netlab.Host) {
	for _, n := range c.Nodes {
		lab.MustRun("ip", "netns", "exec", n.NS, "sysctl", "-qw", "net.ipv4.ip_forward=1")
		// The control plane's namespace stands for the LAN's router: a host-network process
		// reaches a ClusterIP only with a route for it (kube-proxy rewrites it after routing).
		lab.MustRun("ip", "-n", n.NS, "route", "add", "default", "via", cp.IPv4.Addr().String())
		lab.MustRun("ip", "-n", cp.NS, "route", "add", n.PodCIDR.String(), "via", n.IPv4.Addr().String())
		for _, m := range c.Nodes {
			if m != n {
				lab.MustRun("ip", "-n", n.NS, "route", "add", m.PodCIDR.String(), "via", m.IPv4.Addr().String())
			}
		}
	}
}

// startControlPlane runs etcd and kube-apiserver on the host's loopback, advertising the
// control plane's LAN address (the `kubernetes` Service's endpoint) and forwarding that
// address to the loopback port, then kube-controller-manager (which publishes the CA pods
// trust as kube-root-ca.crt) and kube-scheduler. The apiserver reaches the kubelets (logs,
// exec, port-forward) through its egress selector (egressThroughLAN).
func (c *Cluster) startControlPlane(cpHost netlab.Host) {
	logf, err := os.Create(filepath.Join(c.Logs, "etcd-and-kube-apiserver.log"))
	c.must(err)
	c.owner.Cleanup(func() { logf.Close() })
	ip := cpHost.IPv4.Addr()
	args := map[string]string{"advertise-address": ip.String(),
		// envtest turns ServiceAccount admission off; pods need their tokens.
		"disable-admission-plugins": "", "enable-admission-plugins": "ServiceAccount"}
	maps.Copy(args, c.egressThroughLAN(cpHost))
	cp, err := controlplane.Start(controlplane.Options{Out: logf, ServingAddresses: []netip.Addr{ip}, KubeletClientCert: true,
		APIServerArgs: args})
	c.must(err)
	c.owner.Cleanup(func() { _ = cp.Stop() })
	c.CP, c.Kubeconfig = cp, cp.Kubeconfig
	u, err := url.Parse(cp.Config.Host)
	c.must(err)
	port, err := strconv.ParseUint(u.Port(), 10, 16)
	c.must(err)
	c.must(netlab.Forward(c.owner, cpHost.NS, netip.AddrPortFrom(ip, uint16(port)).String(), u.Host))
	c.stepf("control plane up at %s (on the LAN: %s)", u.Host, ip)
	c.start("kube-controller-manager", "", cp.Binary("kube-controller-manager"), "--kubeconfig", cp.Kubeconfig,
		"--root-ca-file", cp.CAFile, "--leader-elect=false", "--secure-port=0",
		"--cluster-cidr", ClusterCIDR.String(), "--service-cluster-ip-range", controlplane.ServiceCIDR,
		"--flex-volume-plugin-dir", filepath.Join(filepath.Dir(c.Logs), "flex-volumes"))
	c.start("kube-scheduler", "", cp.Binary("kube-scheduler"), "--kubeconfig", cp.Kubeconfig,
		"--leader-elect=false", "--secure-port=0")
}

// egressThroughLAN returns the apiserver's flags that let it reach kubelets, which live on the
// LAN, from the host's namespace that has no address there: its egress selector sends
// everything bound for the cluster (kubelets, pods, Services) as HTTP CONNECT over a Unix
// socket to a proxy that dials from the control plane's namespace on the LAN
// (netlab.ConnectProxy), and it asks for each node at its InternalIP (the default, the node's
// name, resolves nowhere). Nothing is configured in the host's namespace, and the apiserver's
// other traffic (etcd, the host's clients) stays where it was.
func (c *Cluster) egressThroughLAN(cpHost netlab.Host) map[string]string {
	socket := filepath.Join(c.dir, "egress.sock")
	c.must(netlab.ConnectProxy(c.owner, cpHost.NS, socket))
	config := filepath.Join(c.dir, "egress-selector.yaml")
	c.must(os.WriteFile(config, []byte(fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %q
`, socket)), 0o644))
	return map[string]string{"egress-selector-config-file": config, "kubelet-preferred-address-types": "InternalIP"}
}

// waitNodesReady waits until every node reports Ready.
func (c *Cluster) waitNodesReady(ctx context.Context, within time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		for _, n := range c.Nodes {
			if n.kubelet.exited() {
				return false, fmt.Errorf("kubelet on %s exited (log: %s)", n.Name, filepath.Join(c.Logs, "kubelet-"+n.Name+".log"))
			}
			var node corev1.Node
			if err := c.CP.Client.Get(ctx, client.ObjectKey{Name: n.Name}, &node); err != nil {
				last = fmt.Sprintf("%s: %v", n.Name, err)
				return false, nil
			}
			if !NodeReady(&node) {
				last = n.Name + " not Ready"
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("nodes not Ready (%s): %w", last, err)
	}
	return nil
}

// NodeReady reports whether the Node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

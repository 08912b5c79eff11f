package cluster

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/internal/netlab"
)

// CNIBinDir is where Debian's containernetworking-plugins puts the CNI plugins.
const CNIBinDir = "/usr/lib/cni"

// SandboxImage is the pod sandbox image every node's containerd runs (hack/image -lab).
const SandboxImage = "portico.local/pause:lab"

// Node is one machine of the cluster: a network namespace on the LAN running containerd,
// kubelet and kube-proxy, its pods on the bridge cni0 in PodCIDR.
type Node struct {
	Name string
	netlab.Host
	PodCIDR netip.Prefix

	dir        string // state: containerd's root and state, the kubelet's root, CNI
	socket     string // containerd's
	cgroupRoot string // the kubelet's --cgroup-root, one per node and run
	kubelet    *process
	containerd *process
}

// startNode writes the node's configuration, starts containerd, imports the images, then the
// kubelet (which registers the Node) and kube-proxy. Its cleanups, run in reverse, stop
// kube-proxy and the kubelet, remove every container, stop containerd, and remove the
// node's mounts and cgroups.
func (c *Cluster) startNode(n *Node, images []string) {
	n.dir = filepath.Join(filepath.Dir(c.Logs), n.Name)
	n.socket = filepath.Join(n.dir, "containerd.sock")
	n.cgroupRoot = fmt.Sprintf("/portico-%d-%s", os.Getpid(), n.Name)
	for _, d := range []string{"cni-conf", "cni-ipam", "kubelet", "pod-logs", "volume-plugins"} {
		c.must(os.MkdirAll(filepath.Join(n.dir, d), 0o755))
	}
	c.owner.Cleanup(func() { removeCgroups(n.cgroupRoot) })
	c.must(makeCgroups(n.cgroupRoot))
	c.owner.Cleanup(func() { unmountUnder(n.dir) })
	c.must(os.WriteFile(filepath.Join(n.dir, "cni-conf", "10-portico-lab.conflist"), []byte(cniConfig(n)), 0o644))
	c.must(os.WriteFile(filepath.Join(n.dir, "containerd.toml"), []byte(containerdConfig(n)), 0o644))
	c.startContainerd(n)
	c.owner.Cleanup(func() { removeContainers(n) })
	c.must(waitContainerd(n))
	for _, img := range images {
		if out, err := n.ctr("images", "import", img).CombinedOutput(); err != nil {
			c.owner.Fatalf("importing %s on %s: %v\n%s", img, n.Name, err, out)
		}
	}
	c.stepf("%s: containerd up, %d images imported", n.Name, len(images))

	c.must(c.CP.WriteKubeconfig(n.kubeconfig(), controlPlaneIP.Addr().String(), ""))
	c.must(os.WriteFile(filepath.Join(n.dir, "kubelet.yaml"), []byte(kubeletConfig(n, c.CP.KubeletClientCAFile)), 0o644))
	c.startKubelet(n)
	c.start("kube-proxy-"+n.Name, n.NS, c.CP.Binary("kube-proxy"), controlplane.KubeProxyArgs(n.Name, n.kubeconfig(), ClusterCIDR)...)
}

func (n *Node) kubeconfig() string { return filepath.Join(n.dir, "kubeconfig") }

// startContainerd runs the node's containerd. A restarted one (StartRuntime) finds its
// running containers again through their shims, which outlive it.
func (c *Cluster) startContainerd(n *Node) {
	n.containerd = c.start("containerd-"+n.Name, n.NS, "containerd", "--config", filepath.Join(n.dir, "containerd.toml"))
}

func (c *Cluster) startKubelet(n *Node) {
	n.kubelet = c.start("kubelet-"+n.Name, n.NS, c.CP.Binary("kubelet"), "--config", filepath.Join(n.dir, "kubelet.yaml"),
		"--kubeconfig", n.kubeconfig(), "--hostname-override", n.Name, "--node-ip", n.IPv4.Addr().String(),
		"--root-dir", filepath.Join(n.dir, "kubelet"), "--cert-dir", filepath.Join(n.dir, "kubelet-pki"))
}

// ctr is containerd's CLI against the node's containerd, in the namespace the CRI uses.
func (n *Node) ctr(args ...string) *exec.Cmd {
	return exec.Command("ctr", append([]string{"--address", n.socket, "--namespace", "k8s.io"}, args...)...)
}

func waitContainerd(n *Node) error {
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true,
		func(context.Context) (bool, error) { return n.ctr("version").Run() == nil, nil })
	if err != nil {
		return fmt.Errorf("containerd on %s never answered on %s: %w", n.Name, n.socket, err)
	}
	return nil
}

// removeContainers deletes every task (container process) of the node's containerd while it
// still runs, so their shims exit and clean up after themselves: a kubelet leaves its pods
// running when it stops. A shim exits a moment after its task is deleted; one whose deletion
// raced the CRI's own handling of the exit ("ttrpc: closed" in containerd's log) stays, so
// what is left after a wait is killed.
func removeContainers(n *Node) {
	out, err := n.ctr("tasks", "list", "--quiet").Output()
	if err != nil {
		return
	}
	for _, id := range strings.Fields(string(out)) {
		_ = n.ctr("tasks", "delete", "--force", id).Run()
	}
	shims := func() map[int]string {
		found := commandLinesNaming("-address " + n.socket + " ")
		maps.DeleteFunc(found, func(_ int, cmdline string) bool { return !strings.Contains(cmdline, "containerd-shim") })
		return found
	}
	_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return len(shims()) == 0, nil })
	for pid := range shims() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// containerdConfig is the node's containerd: its own root, state and sockets; the CRI with
// runc under cgroupfs, the lab's pause image, CNI from the node's own directory, and pod
// network namespaces under its state directory. restrict_oom_score_adj: root here may lack
// CAP_SYS_RESOURCE, and runc fails the sandbox on a negative oom_score_adj without it.
func containerdConfig(n *Node) string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, filepath.Join(n.dir, "containerd-root"), filepath.Join(n.dir, "containerd-state"), n.socket, n.socket+".ttrpc",
		filepath.Join(n.dir, "opt"), SandboxImage, CNIBinDir, filepath.Join(n.dir, "cni-conf"))
}

// cniConfig gives pods an address in the node's PodCIDR on the bridge cni0, the bridge being
// their gateway; the address book (host-local) is the node's own.
func cniConfig(n *Node) string {
	return fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "portico-lab", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}},
  {"type": "portmap", "capabilities": {"portMappings": true}}
]}
`, n.PodCIDR, filepath.Join(n.dir, "cni-ipam"))
}

// kubeletConfig is the node's kubelet. failCgroupV1: the host has the cgroup v1 hierarchy.
// It serves the apiserver (logs, exec, port-forward) as the client clientCA vouches for.
// Every path a kubelet would share with another one on the host is the node's own; image
// garbage collection is off (the imported images cannot be pulled again), and so is eviction
// on disk pressure (the host's disk is the nodes' disk).
func kubeletConfig(n *Node, clientCA string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %q
containerRuntimeEndpoint: %q
address: %q
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
failSwapOn: false
podCIDR: %q
podLogsDir: %q
volumePluginDir: %q
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "0%%", imagefs.available: "0%%"}
resolvConf: /etc/resolv.conf
`, n.cgroupRoot, "unix://"+n.socket, n.IPv4.Addr(), clientCA, n.PodCIDR, filepath.Join(n.dir, "pod-logs"),
		filepath.Join(n.dir, "volume-plugins"))
}

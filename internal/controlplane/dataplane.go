package controlplane

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
)

// StartEndpointSlices runs the upstream kube-controller-manager (built by `make controlplane`)
// with only its endpointslice controller, so EndpointSlices come from Ready Pods exactly as in a
// cluster: no test writes them by hand. Its output goes to out; stop ends it.
func (cp *ControlPlane) StartEndpointSlices(out io.Writer) (stop func(), err error) {
	bin := cp.Binary("kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%w: run `make controlplane` (it builds kube-controller-manager %s from source)", err, Version)
	}
	cmd := exec.Command(bin, "--kubeconfig", cp.Kubeconfig, "--controllers", "endpointslice-controller",
		"--leader-elect=false", "--secure-port=0")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }, nil
}

// KubeProxyArgs are kube-proxy's flags for a node in its own network namespace: nftables mode,
// the node's name, and fixed loopback ports (0 is refused; every namespace has its own
// loopback). The Node object must carry an InternalIP in status.addresses, or kube-proxy waits
// silently and programs nothing.
func KubeProxyArgs(node, kubeconfig string, clusterCIDR netip.Prefix) []string {
	return []string{"--proxy-mode=nftables", "--hostname-override=" + node, "--kubeconfig=" + kubeconfig,
		"--cluster-cidr=" + clusterCIDR.String(),
		"--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256"}
}

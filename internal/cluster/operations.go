package cluster

import (
	"fmt"
	"os/exec"
)

// Operations users do to a node, for the benchmarks that measure them at a client.

// StopRuntime stops the node's kubelet and containerd (SIGTERM, as `systemctl stop` does), and
// nothing else: the containers keep running under their shims, and so does kube-proxy, as on
// a real node whose container runtime is stopped.
func (c *Cluster) StopRuntime(n *Node) {
	n.kubelet.stop()
	n.containerd.stop()
}

// StartRuntime starts the node's containerd and kubelet again after StopRuntime.
func (c *Cluster) StartRuntime(n *Node) error {
	if !n.kubelet.exited() || !n.containerd.exited() {
		return fmt.Errorf("%s: the kubelet or containerd still runs", n.Name)
	}
	c.startContainerd(n)
	if err := waitContainerd(n); err != nil {
		return err
	}
	c.startKubelet(n)
	return nil
}

// SetLink sets the node's port on the LAN bridge down (its cable pulled) or up again.
func (c *Cluster) SetLink(n *Node, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	if out, err := exec.Command("ip", "-n", c.lanSwitch, "link", "set", n.Port, state).CombinedOutput(); err != nil {
		return fmt.Errorf("setting %s's link %s: %v\n%s", n.Name, state, err, out)
	}
	return nil
}

// TagImage gives image from the name to on every node, as pushing a new tag of the same image
// to a registry would: the nodes cannot pull, so a rolling upgrade needs it there already.
func (c *Cluster) TagImage(from, to string) error {
	for _, n := range c.Nodes {
		if out, err := n.ctr("images", "tag", "--force", from, to).CombinedOutput(); err != nil {
			return fmt.Errorf("tagging %s as %s on %s: %v\n%s", from, to, n.Name, err, out)
		}
	}
	return nil
}

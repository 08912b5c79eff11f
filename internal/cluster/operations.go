package cluster

import (
	"fmt"
	"os/exec"

	"github.com/portico-lb/portico/internal/netlab"
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
	if err := n.containerd.spawn(); err != nil {
		return err
	}
	if err := waitContainerd(n); err != nil {
		return err
	}
	return n.kubelet.spawn()
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

// KillContainer sends SIGKILL to a container's process on the node, as a crash or the
// out-of-memory killer ends it: it gets no chance to say goodbye, and its kubelet restarts it.
func (c *Cluster) KillContainer(n *Node, id string) error {
	if out, err := n.ctr("tasks", "kill", "--signal", "SIGKILL", id).CombinedOutput(); err != nil {
		return fmt.Errorf("killing container %s on %s: %v\n%s", id, n.Name, err, out)
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

// AddLANHost plugs another machine (a router, say) into the running cluster's LAN; Stop
// removes it. A failure stops the whole cluster, as a failed Start does.
func (c *Cluster) AddLANHost(role, mac, v4, v6 string) (h netlab.Host, err error) {
	defer func() {
		if e := c.owner.Recovered(recover()); e != nil {
			err = e
		}
	}()
	h = c.lab.AddHost(role, mac, v4, v6)
	c.namespaces = append(c.namespaces, h.NS)
	return h, nil
}

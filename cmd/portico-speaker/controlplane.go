package main

import (
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	"github.com/portico-lb/portico/speaker/controlplane"
	"github.com/portico-lb/portico/speaker/controlplane/cpconfig"
	"github.com/portico-lb/portico/speaker/l2"
	"github.com/portico-lb/portico/speaker/membership"
)

// runControlPlane is the control-plane mode (--control-plane-config): the control-plane nodes
// hold the Kubernetes API's own address among themselves, with no apiserver needed
// (docs/control-plane.md).
func runControlPlane(o options, log logr.Logger) error {
	data, err := os.ReadFile(o.controlPlaneConfig)
	if err != nil {
		return err
	}
	c, err := cpconfig.Parse(data)
	if err != nil {
		return fmt.Errorf("%s: %w", o.controlPlaneConfig, err)
	}
	if len(c.BGPPeers) > 0 {
		return fmt.Errorf("%s: bgpPeers: the control-plane mode answers the VIP over ARP/NDP only so far; remove them", o.controlPlaneConfig)
	}
	self, ok := c.Self(o.node)
	if !ok {
		return fmt.Errorf("%s: this node (%s) is not among the members %v", o.controlPlaneConfig, o.node, c.Names())
	}
	log = log.WithName("control-plane")
	m, err := controlplane.New(c, o.node, l2.NewAnnouncer(log.WithName("l2"), nil), log)
	if err != nil {
		return err
	}
	m.Group, err = membership.Start(membership.Config{Name: o.node, BindAddr: self.Address.String(), BindPort: c.GossipPort,
		Detection: o.detection, Admit: m.Admit, Message: m.Message})
	if err != nil {
		return err
	}
	log.Info("starting", "vip", c.VIP, "members", c.Names(), "readyz", c.Readyz.URL)
	m.Run(signals.SetupSignalHandler())
	return nil
}

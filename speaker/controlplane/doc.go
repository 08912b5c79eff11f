// Package controlplane is the speaker's control-plane mode: the control-plane nodes hold the
// Kubernetes API's own address (the VIP, kubeadm's --control-plane-endpoint) among themselves,
// without the API. Its configuration is a local file (cpconfig); the members gossip through
// package membership, each tells the others whether its own apiserver answers /readyz
// (plan.APIReady) and whether it holds the VIP, and each elects the VIP's owner with the rule
// every Service address is elected by (plan.ControlPlaneOwner, rules.L2Owner). The owner makes
// the VIP a local address and answers ARP/NDP for it through the same announcer as Services
// (package l2). See docs/control-plane.md.
//
// The shape is the speaker's: a loop gathers (checks, reports, membership changes), calls the
// pure decision and has its sides apply it: the VIP side (vip.go) and the reports (reports.go).
// The /readyz check (readyz.go) is the I/O edge of plan.APIReady.
package controlplane

package plan_test

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/plan"
	"github.com/portico-lb/portico/speaker/plan/plantest"
)

// TestProberTranscripts runs testdata/probers/*.txt: which node probes which address, for
// conflicts (the addresses pools hand out next) and for the self-check (the addresses other
// nodes answer for). The L2 scenario language (nodes, pool, l2adv, service, kill, ...) builds
// the cluster; besides it:
//
//	next POOL A B ...    the pool's status.nextAddresses, as the controller writes them
//	inuse POOL A ...     the pool's status.inUse addresses
//	probing POOL MODE    the pool's spec.conflictProbing (Enabled or Disabled)
//	probes               per running speaker, the addresses it probes for conflicts (and the
//	                     interfaces its advertisements name, when they do)
//	selfchecks           per running speaker, the addresses it self-checks
func TestProberTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/probers", func(t *testing.T, path string) {
		s := plantest.NewL2Scenario()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "next", "inuse", "probing":
				p, ok := s.Pools[d.CmdArgs[0].Key]
				if !ok {
					t.Fatalf("%s: no pool %q", d.Pos, d.CmdArgs[0].Key)
				}
				poolStatus(p, d.Cmd, d.CmdArgs[1:])
				return "ok"
			case "probes", "selfchecks":
				return probers(s, d.Cmd)
			}
			if err := s.Run(d); err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			return "ok"
		})
	})
}

// poolStatus sets what the controller writes in a pool's status (next, inuse), or its
// conflictProbing (probing).
func poolStatus(p *v1alpha1.IPAddressPool, cmd string, args []datadriven.CmdArg) {
	switch addrs := plantest.Bare(args); cmd {
	case "next":
		p.Status.NextAddresses = addrs
	case "inuse":
		p.Status.InUse = nil
		for _, a := range addrs {
			p.Status.InUse = append(p.Status.InUse, v1alpha1.AddressInUse{Address: a, MAC: "52:54:00:00:00:99"})
		}
	case "probing":
		p.Spec.ConflictProbing = v1alpha1.ConflictProbing(args[0].Key)
	}
}

// probers lists, per running speaker, the addresses it probes for conflicts (probes) or
// self-checks (selfchecks).
func probers(s *plantest.L2Scenario, what string) string {
	var b strings.Builder
	w := s.World()
	for _, n := range slices.Sorted(maps.Keys(s.Nodes)) {
		if s.Down[n] {
			fmt.Fprintf(&b, "%s: speaker down\n", n)
			continue
		}
		var addrs []string
		if what == "selfchecks" {
			var members []string
			for _, m := range slices.Sorted(maps.Keys(s.Nodes)) {
				if s.Alive(n)(m) {
					members = append(members, m)
				}
			}
			for _, ip := range plan.SelfCheckAddrs(w, n, v1alpha1.DefaultLoadBalancerClass, s.Alive(n), members) {
				addrs = append(addrs, ip.String())
			}
		}
		if what == "probes" {
			for _, t := range plan.ConflictTargets(w, n, s.Alive(n)) {
				a := t.IP.String()
				if t.Interfaces != nil {
					a += " on " + strings.Join(t.Interfaces, ",")
				}
				addrs = append(addrs, a)
			}
		}
		fmt.Fprintf(&b, "%s: %s\n", n, strings.Join(addrs, ", "))
	}
	return b.String()
}

// TestOneProberPerAddress: of three nodes, exactly one self-checks each address, never its
// owner, also when the owner is the only eligible node (externalTrafficPolicy Local with one
// endpoint): a new address costs one self-check entry, not one per other node.
func TestOneProberPerAddress(t *testing.T) {
	var svcs []corev1.Service
	ip := netip.MustParseAddr("198.51.100.10")
	for range 30 {
		svcs = append(svcs, plantest.LBService("s"+ip.String(), ip.String()))
		ip = ip.Next()
	}
	local := plantest.LBService("local", "198.51.100.99")
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	node, ready := "node-b", true
	w := plantest.World(append(svcs, local)...)
	w.EndpointSlices = []discoveryv1.EndpointSlice{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "local-x", Labels: map[string]string{discoveryv1.LabelServiceName: "local"}},
		Endpoints:  []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.1"}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}}
	probers := map[netip.Addr][]string{}
	for _, n := range plantest.NodeNames {
		for _, ip := range plan.SelfCheckAddrs(w, n, v1alpha1.DefaultLoadBalancerClass, plantest.AllAlive, plantest.NodeNames) {
			probers[ip] = append(probers[ip], n)
		}
	}
	owned := plantest.Owners(w, plantest.AllAlive)
	if len(probers) != len(owned) || len(owned) != 31 {
		t.Fatalf("%d addresses probed, %d owned; want 31 each", len(probers), len(owned))
	}
	for ip, who := range probers {
		if len(who) != 1 || who[0] == owned[ip][0] {
			t.Errorf("%v probed by %v, owned by %v: want one prober, not the owner", ip, who, owned[ip])
		}
	}
}

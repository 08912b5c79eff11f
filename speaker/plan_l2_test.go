package speaker

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// TestL2Transcripts runs testdata/l2/*.txt: who answers for which address over L2, as every
// node computes it alone from the cluster's objects and its own view of the gossip group, and
// the Speaker status each writes. The scenario language (nodes, pool, l2adv, service, kill,
// partition, heal, plan all, ...) is described in docs/testing.md.
func TestL2Transcripts(t *testing.T) {
	datadriven.Walk(t, "testdata/l2", func(t *testing.T, path string) {
		s := newL2Scenario()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if err := s.run(d); err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			if d.Cmd == "plan" {
				return s.plan()
			}
			return "ok"
		})
	})
}

// l2Scenario is the cluster a transcript builds, by object name, and each speaker's state.
type l2Scenario struct {
	nodes    map[string]*corev1.Node
	pools    map[string]*v1alpha1.IPAddressPool
	ads      map[string]*v1alpha1.L2Advertisement
	services map[string]*corev1.Service // by namespace/name
	slices   map[string]*discoveryv1.EndpointSlice
	down     map[string]bool         // speakers not running
	side     map[string]bool         // nodes cut off with the partitioned side
	answered map[netip.Addr][]string // who answered each address at the last plan all
	planned  bool
}

func newL2Scenario() *l2Scenario {
	return &l2Scenario{nodes: map[string]*corev1.Node{}, pools: map[string]*v1alpha1.IPAddressPool{},
		ads: map[string]*v1alpha1.L2Advertisement{}, services: map[string]*corev1.Service{},
		slices: map[string]*discoveryv1.EndpointSlice{}, down: map[string]bool{}, side: map[string]bool{}}
}

func (s *l2Scenario) run(d *datadriven.TestData) error {
	args := d.CmdArgs
	name := ""
	if len(args) > 0 && args[0].Vals == nil {
		name, args = args[0].Key, args[1:]
	}
	switch d.Cmd {
	case "nodes":
		for _, a := range d.CmdArgs {
			s.nodes[a.Key] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.Key, Labels: map[string]string{}}}
		}
	case "cordon", "uncordon":
		n, ok := s.nodes[name]
		if !ok {
			return fmt.Errorf("no node %q", name)
		}
		n.Spec.Unschedulable = d.Cmd == "cordon"
	case "label", "unlabel":
		n, ok := s.nodes[name]
		if !ok {
			return fmt.Errorf("no node %q", name)
		}
		for _, a := range args {
			if d.Cmd == "unlabel" {
				delete(n.Labels, a.Key)
			} else {
				n.Labels[a.Key] = strings.Join(a.Vals, ",")
			}
		}
	case "pool":
		p := &v1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labelsArg(args, "labels")}}
		for _, r := range bare(args) {
			p.Spec.Addresses = append(p.Spec.Addresses, v1alpha1.AddressRange(r))
		}
		s.pools[name] = p
	case "l2adv":
		ad := &v1alpha1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, p := range valsArg(args, "pools") {
			ad.Spec.IPAddressPools = append(ad.Spec.IPAddressPools, v1alpha1.Name(p))
		}
		for _, ifc := range valsArg(args, "interfaces") {
			ad.Spec.Interfaces = append(ad.Spec.Interfaces, v1alpha1.InterfaceName(ifc))
		}
		ad.Spec.IPAddressPoolSelectors = selectorArg(args, "pool-labels")
		ad.Spec.NodeSelectors = selectorArg(args, "node-labels")
		ad.Spec.ServiceSelectors = selectorArg(args, "service-labels")
		for _, p := range valsArg(args, "preferred") {
			label, weight, _ := strings.Cut(p, ":")
			k, v, _ := strings.Cut(label, "=")
			w, err := strconv.Atoi(weight)
			if err != nil {
				return fmt.Errorf("preferred %q: want label=value:weight", p)
			}
			ad.Spec.PreferredNodeSelectors = append(ad.Spec.PreferredNodeSelectors, v1alpha1.PreferredNodeSelector{
				Weight: int32(w), Preference: metav1.LabelSelector{MatchLabels: map[string]string{k: v}}})
		}
		s.ads[name] = ad
	case "service":
		return s.putService(name, args)
	case "endpoints":
		key := nsArg(args) + "/" + name
		if _, ok := s.services[key]; !ok {
			return fmt.Errorf("no service %s", key)
		}
		s.slices[key] = endpointSlice(s.services[key], bare(args))
	case "delete":
		return s.delete(name, args)
	case "kill", "start", "partition":
		if d.Cmd == "partition" {
			clear(s.side)
		}
		for _, a := range d.CmdArgs {
			if _, ok := s.nodes[a.Key]; !ok {
				return fmt.Errorf("no node %q", a.Key)
			}
			switch d.Cmd {
			case "kill":
				s.down[a.Key] = true
			case "start":
				delete(s.down, a.Key)
			case "partition":
				s.side[a.Key] = true
			}
		}
	case "heal":
		clear(s.side)
	case "plan":
		if name != "all" {
			return fmt.Errorf("plan takes all")
		}
	default:
		return fmt.Errorf("unknown command %q", d.Cmd)
	}
	return nil
}

func (s *l2Scenario) putService(name string, args []datadriven.CmdArg) error {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsArg(args), Labels: labelsArg(args, "labels")},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	for _, ip := range valsArg(args, "ip") {
		if _, err := netip.ParseAddr(ip); err != nil {
			return err
		}
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	if p := valsArg(args, "policy"); len(p) == 1 {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicy(p[0])
	}
	if c := valsArg(args, "class"); len(c) == 1 {
		svc.Spec.LoadBalancerClass = &c[0]
	}
	key := svc.Namespace + "/" + name
	s.services[key] = svc
	delete(s.slices, key)
	if eps := valsArg(args, "endpoints"); eps != nil {
		s.slices[key] = endpointSlice(svc, eps)
	}
	return nil
}

func (s *l2Scenario) delete(kind string, args []datadriven.CmdArg) error {
	if len(args) == 0 {
		return fmt.Errorf("delete %s: which one?", kind)
	}
	name := args[0].Key
	var had bool
	switch kind {
	case "node":
		had = deleteNamed(s.nodes, name)
	case "pool":
		had = deleteNamed(s.pools, name)
	case "l2adv":
		had = deleteNamed(s.ads, name)
	case "service":
		name = nsArg(args[1:]) + "/" + name
		had = deleteNamed(s.services, name)
		delete(s.slices, name)
	default:
		return fmt.Errorf("delete: unknown kind %q", kind)
	}
	if !had {
		return fmt.Errorf("delete: no %s %q", kind, name)
	}
	return nil
}

// world lists the objects as the speaker's cache would, sorted by name.
func (s *l2Scenario) world() World {
	return World{Nodes: sortedByName(s.nodes), Pools: sortedByName(s.pools), Advertisements: sortedByName(s.ads),
		Services: sortedByName(s.services), EndpointSlices: sortedByName(s.slices)}
}

// alive is node me's view of the gossip group: running speakers on its side of a partition.
func (s *l2Scenario) alive(me string) func(string) bool {
	return func(n string) bool { return !s.down[n] && s.side[n] == s.side[me] }
}

// plan runs MakePlan as every running speaker would and prints what each writes.
func (s *l2Scenario) plan() string {
	var b strings.Builder
	w := s.world()
	answered := map[netip.Addr][]string{}
	for _, n := range slices.Sorted(maps.Keys(s.nodes)) {
		if s.down[n] {
			fmt.Fprintf(&b, "%s: speaker down\n", n)
			continue
		}
		p := MakePlan(w, n, v1alpha1.DefaultLoadBalancerClass, s.alive(n))
		ifaces := map[netip.Addr][]string{}
		for ip, c := range p.Mine {
			ifaces[ip] = c.Interfaces
			answered[ip] = append(answered[ip], n)
		}
		r := planStatus(p, ifaces)
		fmt.Fprintf(&b, "%s: Ready=%s L2=%d%s\n", n, r.ready.Status, r.status.L2Announcements, s.view(n))
		for _, a := range r.status.Announcements {
			on := ""
			if len(a.Interfaces) > 0 {
				on = " on " + strings.Join(a.Interfaces, ",")
			}
			fmt.Fprintf(&b, "  %s %s%s\n", a.IP, a.Service, on)
		}
		for _, e := range r.status.ConfigErrors {
			fmt.Fprintf(&b, "  config error: %s\n", e)
		}
	}
	addrs := s.addresses()
	for _, ip := range slices.SortedFunc(maps.Keys(addrs), netip.Addr.Compare) {
		switch who := answered[ip]; {
		case len(who) == 0:
			fmt.Fprintf(&b, "unanswered: %s (%s)\n", ip, addrs[ip])
		case len(who) > 1:
			fmt.Fprintf(&b, "split: %s answered by %s\n", ip, strings.Join(who, ", "))
		}
	}
	if s.planned {
		for _, ip := range slices.SortedFunc(maps.Keys(addrs), netip.Addr.Compare) {
			if before, now := s.answered[ip], answered[ip]; !slices.Equal(before, now) {
				fmt.Fprintf(&b, "moved: %s %s -> %s\n", ip, nobodyOr(before), nobodyOr(now))
			}
		}
	}
	s.answered, s.planned = answered, true
	return b.String()
}

// view shows a partitioned node's members.
func (s *l2Scenario) view(me string) string {
	if len(s.side) == 0 {
		return ""
	}
	var sees []string
	for _, n := range slices.Sorted(maps.Keys(s.nodes)) {
		if s.alive(me)(n) {
			sees = append(sees, n)
		}
	}
	return " (sees " + strings.Join(sees, " ") + ")"
}

// addresses are the Services' addresses (of any class), with the Services holding each.
func (s *l2Scenario) addresses() map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, key := range slices.Sorted(maps.Keys(s.services)) {
		for _, ip := range v1alpha1.IngressAddrs(s.services[key]) {
			out[ip] = strings.TrimPrefix(out[ip]+","+key, ",")
		}
	}
	return out
}

func nobodyOr(nodes []string) string {
	if len(nodes) == 0 {
		return "nobody"
	}
	return strings.Join(nodes, ",")
}

func endpointSlice(svc *corev1.Service, nodes []string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}}}
	for _, n := range nodes {
		if n == "" {
			continue
		}
		node, state, _ := strings.Cut(n, ":")
		ready := state != "notready"
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	return es
}

func deleteNamed[T any](m map[string]*T, name string) bool {
	_, had := m[name]
	delete(m, name)
	return had
}

func sortedByName[T any](m map[string]*T) []T {
	out := make([]T, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, *m[k])
	}
	return out
}

// bare lists the arguments without a value: a pool's entries, a Service's endpoint nodes.
func bare(args []datadriven.CmdArg) []string {
	var out []string
	for _, a := range args {
		if a.Vals == nil {
			out = append(out, a.Key)
		}
	}
	return out
}

func valsArg(args []datadriven.CmdArg, key string) []string {
	for _, a := range args {
		if a.Key == key {
			return a.Vals
		}
	}
	return nil
}

func nsArg(args []datadriven.CmdArg) string {
	if ns := valsArg(args, "ns"); len(ns) == 1 {
		return ns[0]
	}
	return "default"
}

// labelsArg reads key=(k=v, k2=v2) as a label map.
func labelsArg(args []datadriven.CmdArg, key string) map[string]string {
	var out map[string]string
	for _, kv := range valsArg(args, key) {
		k, v, _ := strings.Cut(kv, "=")
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// selectorArg reads key=(k=v, ...) as one label selector matching all the labels.
func selectorArg(args []datadriven.CmdArg, key string) []metav1.LabelSelector {
	if l := labelsArg(args, key); l != nil {
		return []metav1.LabelSelector{{MatchLabels: l}}
	}
	return nil
}

package plantest

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/datadriven"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/rules/election"
	"github.com/portico-lb/portico/speaker/plan"
)

// L2Scenario is the cluster an L2 transcript builds, by object name, and which speakers run
// and see each other. Its language (nodes, pool, l2adv, service, kill, partition, heal, plan
// all, ...) is described in docs/testing.md.
type L2Scenario struct {
	Nodes    map[string]*corev1.Node
	Pools    map[string]*v1alpha1.IPAddressPool
	Ads      map[string]*v1alpha1.L2Advertisement
	Services map[string]*corev1.Service // by namespace/name
	Slices   map[string]*discoveryv1.EndpointSlice
	Down     map[string]bool // speakers not running
	Side     map[string]bool // nodes cut off with the partitioned side
	Subnets  rules.Subnets   // what each node's speaker reports it can answer on
	// Holders are what the Speakers' statuses list: what each running speaker answered at the
	// latest plan all, and the stale claims of those killed (SIGKILL) since.
	Holders rules.Holders
	// Clock is the time of the latest plan all (each moves it a second on; tick more);
	// Settle the speakers' --l2-balance-settle; Joined when a speaker last started (every node
	// sees it join at once here).
	Clock  time.Time
	Settle time.Duration
	Joined time.Time

	answered map[netip.Addr][]string // who answered what at the latest plan all
}

// ScenarioEpoch is when an L2 scenario's clock starts.
var ScenarioEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// NewL2Scenario is an empty cluster.
func NewL2Scenario() *L2Scenario {
	return &L2Scenario{Nodes: map[string]*corev1.Node{}, Pools: map[string]*v1alpha1.IPAddressPool{},
		Ads: map[string]*v1alpha1.L2Advertisement{}, Services: map[string]*corev1.Service{},
		Slices: map[string]*discoveryv1.EndpointSlice{}, Down: map[string]bool{}, Side: map[string]bool{}, Subnets: rules.Subnets{},
		Holders: rules.Holders{}, Clock: ScenarioEpoch, Settle: rules.DefaultL2BalanceSettle}
}

// Run applies one command of the language (plan all changes nothing: the caller prints).
func (s *L2Scenario) Run(d *datadriven.TestData) error {
	args := d.CmdArgs
	name := ""
	if len(args) > 0 && args[0].Vals == nil {
		name, args = args[0].Key, args[1:]
	}
	switch d.Cmd {
	case "nodes":
		for _, a := range d.CmdArgs {
			s.Nodes[a.Key] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.Key, Labels: map[string]string{}}}
		}
	case "cordon", "uncordon", "notready", "ready", "label", "unlabel", "ips":
		return s.editNode(d.Cmd, name, args)
	case "pool":
		p := &v1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labelsArg(args, "labels")}}
		for _, r := range Bare(args) {
			p.Spec.Addresses = append(p.Spec.Addresses, v1alpha1.AddressRange(r))
		}
		s.Pools[name] = p
	case "l2adv":
		return s.putL2Adv(name, args)
	case "service":
		return s.putService(name, args)
	case "endpoints":
		key := nsArg(args) + "/" + name
		if _, ok := s.Services[key]; !ok {
			return fmt.Errorf("no service %s", key)
		}
		s.Slices[key] = endpointSlice(s.Services[key], Bare(args))
	case "delete":
		return s.delete(name, args)
	case "tick":
		if len(d.CmdArgs) != 1 {
			return fmt.Errorf("tick DURATION")
		}
		by, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			return err
		}
		s.Clock = s.Clock.Add(by)
	case "kill", "stop", "start", "partition", "heal":
		return s.speakers(d.Cmd, d.CmdArgs)
	case "subnets":
		return s.subnets(name, args)
	case "plan":
		if name != "all" {
			return fmt.Errorf("plan takes all")
		}
	default:
		return fmt.Errorf("unknown command %q", d.Cmd)
	}
	return nil
}

// editNode changes node name: cordon, uncordon, notready, ready, label k=v..., unlabel k...,
// ips A... (its InternalIP addresses).
func (s *L2Scenario) editNode(cmd, name string, args []datadriven.CmdArg) error {
	n, ok := s.Nodes[name]
	if !ok {
		return fmt.Errorf("no node %q", name)
	}
	switch cmd {
	case "cordon", "uncordon":
		n.Spec.Unschedulable = cmd == "cordon"
	case "notready", "ready":
		n.Status.Conditions = nil
		if cmd == "notready" {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		}
	case "label", "unlabel":
		for _, a := range args {
			if cmd == "unlabel" {
				delete(n.Labels, a.Key)
			} else {
				n.Labels[a.Key] = strings.Join(a.Vals, ",")
			}
		}
	case "ips":
		n.Status.Addresses = nil
		for _, ip := range Bare(args) {
			if _, err := netip.ParseAddr(ip); err != nil {
				return err
			}
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
	}
	return nil
}

// speakers runs, stops or partitions the speakers of the nodes args name.
func (s *L2Scenario) speakers(cmd string, args []datadriven.CmdArg) error {
	if cmd == "partition" || cmd == "heal" {
		clear(s.Side)
	}
	for _, a := range args {
		if _, ok := s.Nodes[a.Key]; !ok {
			return fmt.Errorf("no node %q", a.Key)
		}
		switch cmd {
		case "kill": // SIGKILL: its Speaker status keeps what it answered for
			s.Down[a.Key] = true
		case "stop": // SIGTERM: its last status write lists no L2 address
			s.Down[a.Key] = true
			s.dropHeld(a.Key)
		case "start":
			delete(s.Down, a.Key)
			s.Joined = s.Clock
		case "partition":
			s.Side[a.Key] = true
		}
	}
	return nil
}

func (s *L2Scenario) putL2Adv(name string, args []datadriven.CmdArg) error {
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
	s.Ads[name] = ad
	return nil
}

func (s *L2Scenario) putService(name string, args []datadriven.CmdArg) error {
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
	s.Services[key] = svc
	delete(s.Slices, key)
	if eps := valsArg(args, "endpoints"); eps != nil {
		s.Slices[key] = endpointSlice(svc, eps)
	}
	return nil
}

// subnets sets what node reports it can answer on: "subnets b 10.0.1.0/24 10.0.2.0/24", "subnets
// b none" (no up interface answers), or "subnets b" (nothing reported, as an older speaker).
func (s *L2Scenario) subnets(node string, args []datadriven.CmdArg) error {
	if _, ok := s.Nodes[node]; !ok {
		return fmt.Errorf("no node %q", node)
	}
	if len(args) == 0 {
		delete(s.Subnets, node)
		return nil
	}
	s.Subnets[node] = []netip.Prefix{}
	for _, a := range args {
		if a.Key == "none" {
			continue
		}
		p, err := netip.ParsePrefix(a.Key)
		if err != nil {
			return err
		}
		s.Subnets[node] = append(s.Subnets[node], p)
	}
	return nil
}

func (s *L2Scenario) delete(kind string, args []datadriven.CmdArg) error {
	if len(args) == 0 {
		return fmt.Errorf("delete %s: which one?", kind)
	}
	name := args[0].Key
	var had bool
	switch kind {
	case "node":
		had = deleteNamed(s.Nodes, name)
	case "pool":
		had = deleteNamed(s.Pools, name)
	case "l2adv":
		had = deleteNamed(s.Ads, name)
	case "service":
		name = nsArg(args[1:]) + "/" + name
		had = deleteNamed(s.Services, name)
		delete(s.Slices, name)
	default:
		return fmt.Errorf("delete: unknown kind %q", kind)
	}
	if !had {
		return fmt.Errorf("delete: no %s %q", kind, name)
	}
	return nil
}

// World lists the objects as the speaker's cache would, sorted by name.
func (s *L2Scenario) World() plan.World {
	return plan.World{Nodes: sortedByName(s.Nodes), Pools: sortedByName(s.Pools), Advertisements: sortedByName(s.Ads),
		Services: sortedByName(s.Services), EndpointSlices: sortedByName(s.Slices), Subnets: maps.Clone(s.Subnets),
		Holders: maps.Clone(s.Holders), Speakers: slices.Sorted(maps.Keys(s.Nodes)), Now: s.Clock, BalanceSettle: s.Settle, MembersSince: s.Joined}
}

// Wrote records what the running speakers answered for at a plan all, as their Speaker
// statuses list it: a node keeps its since while it keeps answering (from one plan all to the
// next). A speaker that is down wrote nothing: its claims stay as they were.
func (s *L2Scenario) Wrote(answered map[netip.Addr][]string) {
	defer func() { s.answered = answered }()
	held := rules.Holders{}
	for ip, hs := range s.Holders {
		for _, h := range hs {
			if s.Down[h.Node] {
				held[ip] = append(held[ip], h)
			}
		}
	}
	for ip, nodes := range answered {
		for _, n := range nodes {
			h := election.Holder{Node: n, Since: s.Clock}
			if i := slices.IndexFunc(s.Holders[ip], func(o election.Holder) bool { return o.Node == n }); i >= 0 && slices.Contains(s.answered[ip], n) {
				h.Since = s.Holders[ip][i].Since
			}
			held[ip] = append(held[ip], h)
		}
	}
	s.Holders = held
}

// dropHeld clears what node's status lists, as a speaker stopping in order does.
func (s *L2Scenario) dropHeld(node string) {
	for ip, hs := range s.Holders {
		s.Holders[ip] = slices.DeleteFunc(hs, func(h election.Holder) bool { return h.Node == node })
		if len(s.Holders[ip]) == 0 {
			delete(s.Holders, ip)
		}
	}
}

// Alive is node me's view of the gossip group: running speakers on its side of a partition.
func (s *L2Scenario) Alive(me string) func(string) bool {
	return func(n string) bool { return !s.Down[n] && s.Side[n] == s.Side[me] }
}

func endpointSlice(svc *corev1.Service, nodes []string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}}}
	for _, n := range nodes {
		if n == "" {
			continue
		}
		node, state, _ := strings.Cut(n, ":")
		ready := state != "notready" && state != "terminating"
		conds := discoveryv1.EndpointConditions{Ready: &ready}
		if state == "terminating" { // an evicted pod, still serving
			serving, terminating := true, true
			conds.Serving, conds.Terminating = &serving, &terminating
		}
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{NodeName: &node, Conditions: conds})
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

// Bare lists the arguments without a value: a pool's entries, a Service's endpoint nodes.
func Bare(args []datadriven.CmdArg) []string {
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

package decide

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
	"github.com/portico-lb/portico/rules"
)

// TestDecideTranscripts tells, in testdata/decide/*.txt, what the controller decides for each
// Service as the cluster changes: the address, every condition, the annotation, the events and
// which pools and waiting Services it wakes. Each decision is applied to the Service as its
// status write would, so the next one starts from what is stored. Commands:
//
//	pool <name> <entry>... [hold=<d>] [probing=disabled]
//	                                    an IPAddressPool (added or replaced), hold: its addressHold,
//	                                    probing: its conflictProbing; prints Services moved
//	service <name>... [ip=<a>] [pool=<p>] [share=<key>] [port=<PROTO/n>] [type=<t>] [finalizer=<f>] [writing=<a>]
//	        [families=4,6] [policy=single|prefer|require] [metallb-pool=<p>] [brief]
//	                                    create or edit Services in namespace default, and decide each;
//	                                    writing: a write of ours listing <a> is still on its way
//	reconcile <name>...                 decide again, nothing changed (a retry)
//	recreate <name>...                  delete and create again, the controller seeing only the new object
//	delete <name>                       delete: a Service with a finalizer becomes Terminating
//	                                    (the next delete: its finalizer is removed, it is gone)
//	endpoints <name> ready=<n> [notready=<n>]  its EndpointSlice
//	pods <k=v>...                       the labels of the pods in namespace default
//	node <name>...                      Ready nodes
//	l2advertisement <name> [pools=<p>,...]
//	speaker <node> [mac=<m>] [announces=<svc>] [heard=<svc>:<mac>] [datapath=<reason>]  a speaker's report
//	health <name>                       the health reconciler's decision for it
//	tick <duration>                     the clock moves on
//	pools                               the pool reconciler: holds whose time is up end, and every pool's
//	                                    counts, Exhausted, OrphanedIPs and holds, stored in its status
//	restart                             a new controller: a new book rebuilt from the Services' and pools' status
//	status <pool>...                    the pool reconciler's whole decision (LookAtPools, Pool): what its
//	                                    status write changes and the events it tells; stored
//	foreign <node> <ip>/<mac>...        a live speaker heard foreign hosts answer for those addresses
func TestDecideTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/decide", func(t *testing.T, path string) {
		w := &world{book: NewBook(), svcs: map[string]*corev1.Service{},
			now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		w.desk = NewNewsDesk(0, w.now)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var b strings.Builder
			w.out = &b
			w.run(t, d)
			if b.Len() == 0 {
				return "ok\n"
			}
			return b.String()
		})
	})
}

// world is the cluster a transcript tells of, as the controller reads it.
type world struct {
	book  *Book
	svcs  map[string]*corev1.Service // as stored
	pools []porticov1.IPAddressPool
	facts HealthFacts
	desk  *NewsDesk
	now   time.Time
	out   *strings.Builder
	uids  int // objects created so far: each gets its own UID
}

func (w *world) run(t *testing.T, d *datadriven.TestData) {
	arg := func(key string) string {
		var v string
		if d.HasArg(key) {
			d.ScanArgs(t, key, &v)
		}
		return v
	}
	names := func() []string {
		var n []string
		for _, a := range d.CmdArgs {
			if len(a.Vals) == 0 && a.Key != "brief" && a.Key != "unseen" {
				n = append(n, a.Key)
			}
		}
		return n
	}
	switch d.Cmd {
	case "pool":
		p := porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: d.CmdArgs[0].Key}}
		for _, a := range d.CmdArgs[1:] {
			if len(a.Vals) == 0 {
				p.Spec.Addresses = append(p.Spec.Addresses, porticov1.AddressRange(a.Key))
			}
		}
		if arg("probing") == "disabled" {
			p.Spec.ConflictProbing = porticov1.ConflictProbingDisabled
		}
		if h := arg("hold"); h != "" {
			dur, err := time.ParseDuration(h)
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			p.Spec.AddressHold = &porticov1.AddressHold{Duration: metav1.Duration{Duration: dur}}
		}
		for _, old := range w.pools {
			if old.Name == p.Name {
				p.Status = old.Status
			}
		}
		w.pools = slices.DeleteFunc(w.pools, func(o porticov1.IPAddressPool) bool { return o.Name == p.Name })
		w.pools = append(w.pools, p)
		w.facts.Pools = w.pools
		var aps []allocator.Pool
		for i := range w.pools {
			aps = append(aps, AllocatorPool(&w.pools[i]))
		}
		for _, moved := range w.book.alloc.SetPools(aps) {
			fmt.Fprintf(w.out, "moved %s\n", moved)
		}
		w.printServed(w.book.ServeBacklog(w.pools))
	case "service":
		for _, name := range names() {
			svc := w.svcs["default/"+name]
			if svc == nil {
				svc = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
					CreationTimestamp: metav1.NewTime(w.now.Add(time.Duration(len(w.svcs)) * time.Millisecond)),
					UID:               types.UID(fmt.Sprintf("%s-%d", name, w.uids))},
					Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
						Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}}}}
				w.svcs["default/"+name] = svc
				w.uids++
			}
			for key, ann := range map[string]string{"ip": porticov1.AnnotationLoadBalancerIPs, "pool": porticov1.AnnotationAddressPool, "share": porticov1.AnnotationAllowSharedIP,
				"metallb-pool": porticov1.MetalLBAddressPool[0]} {
				if v := arg(key); v != "" {
					metav1.SetMetaDataAnnotation(&svc.ObjectMeta, ann, v)
				}
			}
			if p := arg("port"); p != "" {
				proto, port, _ := strings.Cut(p, "/")
				var n int32
				fmt.Sscan(port, &n)
				svc.Spec.Ports = []corev1.ServicePort{{Protocol: corev1.Protocol(proto), Port: n}}
			}
			if fams := arg("families"); fams != "" { // 4,6 or 6,4 or 6
				svc.Spec.IPFamilies = nil
				for _, f := range strings.Split(fams, ",") {
					svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, map[string]corev1.IPFamily{"4": corev1.IPv4Protocol, "6": corev1.IPv6Protocol}[f])
				}
			}
			if policy := arg("policy"); policy != "" { // single, prefer, require
				svc.Spec.IPFamilyPolicy = ptr.To(map[string]corev1.IPFamilyPolicy{"single": corev1.IPFamilyPolicySingleStack,
					"prefer": corev1.IPFamilyPolicyPreferDualStack, "require": corev1.IPFamilyPolicyRequireDualStack}[policy])
			}
			if typ := arg("type"); typ != "" {
				svc.Spec.Type = corev1.ServiceType(typ)
			}
			if svc.Spec.Type != corev1.ServiceTypeLoadBalancer { // as the apiserver does
				svc.Status.LoadBalancer = corev1.LoadBalancerStatus{}
			}
			if f := arg("finalizer"); f != "" {
				svc.Finalizers = append(svc.Finalizers, f)
			}
			if d.HasArg("unseen") { // edited while no controller runs
				continue
			}
			w.decide(t, svc, d.HasArg("brief"), arg("writing"))
		}
	case "recreate":
		// Deleted and created again between two reconciles: the controller sees only the new
		// object, under the old one's name.
		for _, name := range names() {
			old := w.svcs["default/"+name]
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Annotations: old.Annotations,
				CreationTimestamp: metav1.NewTime(w.now), UID: types.UID(fmt.Sprintf("%s-%d", name, w.uids))}, Spec: old.Spec}
			delete(svc.Annotations, porticov1.AnnotationAllocatedFromPool)
			w.uids++
			w.svcs["default/"+name] = svc
			w.decide(t, svc, d.HasArg("brief"), "")
		}
	case "reconcile":
		for _, name := range names() {
			w.decide(t, w.svcs["default/"+name], d.HasArg("brief"), "")
		}
	case "delete":
		key := "default/" + d.CmdArgs[0].Key
		svc := w.svcs[key]
		if len(svc.Finalizers) > 0 && svc.DeletionTimestamp == nil {
			svc.DeletionTimestamp = ptr.To(metav1.NewTime(w.now))
			w.decide(t, svc, false, "")
			return
		}
		delete(w.svcs, key)
		w.print(nil, Service(w.book, Seen{Key: key, Now: w.now}))
	case "endpoints":
		name := d.CmdArgs[0].Key
		var ready, notReady int
		fmt.Sscan(arg("ready"), &ready)
		fmt.Sscan(arg("notready"), &notReady)
		s := discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name + "-x",
			Labels: map[string]string{discoveryv1.LabelServiceName: name}}}
		for i := range ready + notReady {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.0.%d", i+10)},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(i < ready)}})
		}
		w.facts.EndpointSlices = append(slices.DeleteFunc(w.facts.EndpointSlices, func(o discoveryv1.EndpointSlice) bool { return o.Name == s.Name }), s)
	case "pods":
		w.facts.Pods = nil
		for _, a := range d.CmdArgs {
			k, v, _ := strings.Cut(a.String(), "=")
			w.facts.Pods = append(w.facts.Pods, map[string]string{k: v})
		}
	case "node":
		for _, name := range names() {
			w.facts.Nodes = append(w.facts.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
		}
	case "l2advertisement":
		ad := porticov1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: d.CmdArgs[0].Key}}
		if d.HasArg("pools") {
			for _, p := range strings.Split(arg("pools"), ",") {
				ad.Spec.IPAddressPools = append(ad.Spec.IPAddressPools, porticov1.Name(p))
			}
		}
		w.facts.L2Advertisements = append(w.facts.L2Advertisements, ad)
	case "speaker":
		w.speaker(d.CmdArgs[0].Key, arg("mac"), arg("announces"), arg("heard"), arg("subnets"), arg("datapath"))
	case "health":
		svc := w.svcs["default/"+d.CmdArgs[0].Key]
		rd, again := Health(svc, w.facts, w.desk, w.now)
		w.print(svc, rd)
		if again > 0 {
			fmt.Fprintf(w.out, "look again in %s\n", again)
		}
	case "tick":
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		w.now = w.now.Add(dur)
	case "pools":
		if freed := w.book.ExpireHolds(w.now); len(freed) > 0 {
			fmt.Fprintf(w.out, "holds ended in %s\n", strings.Join(slices.Compact(slices.Sorted(slices.Values(freed))), ","))
			if waiting := w.book.WaitingServices(); len(waiting) > 0 {
				fmt.Fprintf(w.out, "retry %s\n", strings.Join(waiting, ","))
			}
		}
		for i, p := range w.pools {
			f := w.book.PoolFacts(p.Name)
			fmt.Fprintf(w.out, "%s: %d assigned, %d waiting\n", p.Name, f.Stats.Assigned[0]+f.Stats.Assigned[1], f.Waiting)
			for _, c := range []metav1.Condition{ExhaustedCondition(f), OrphanCondition(f)} {
				fmt.Fprintf(w.out, "  %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
			}
			w.pools[i].Status.Holds = HoldEntries(f.Holds)
			for _, e := range w.pools[i].Status.Holds {
				fmt.Fprintf(w.out, "  hold %s for %s/%s until %s\n", e.Address, e.Namespace, e.Name, e.Until.Sub(w.now))
			}
		}
	case "restart":
		w.restart()
	case "status":
		w.poolStatus(names())
	case "foreign":
		w.foreign(d.CmdArgs[0].Key, d.CmdArgs[1:])
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
}

// decide runs the Service reconcile's decision on what the world holds, and stores its write.
// writing names an address a write of ours still on its way lists (statusWriter.mayList).
func (w *world) decide(t *testing.T, svc *corev1.Service, brief bool, writing string) {
	in := Seen{Key: svc.Namespace + "/" + svc.Name, Svc: svc.DeepCopy(), Listed: porticov1.IngressAddrs(svc),
		Ours: rules.Handles(svc, porticov1.DefaultLoadBalancerClass, true), Now: w.now}
	if writing != "" {
		in.Listed = append(in.Listed, netip.MustParseAddr(writing))
	}
	in.Req, in.ReqErr = w.request(svc)
	if !slices.ContainsFunc(svc.Status.Conditions, func(c metav1.Condition) bool { return c.Type == porticov1.ConditionEndpointsReady }) {
		in.Health = &w.facts
	}
	rd := Service(w.book, in)
	if brief && in.Ours {
		fmt.Fprintf(w.out, "%s: %s\n", svc.Name, condLine(rd.Conditions[0]))
		w.store(svc, rd)
		return
	}
	w.print(svc, rd)
}

// print tells a decision for the stored Service, and stores its write.
func (w *world) print(svc *corev1.Service, rd Ready) {
	want := svc.DeepCopy()
	if svc != nil {
		rd.Apply(want)
	}
	switch {
	case svc == nil:
	case sameWrite(svc, want):
		fmt.Fprintln(w.out, "no write")
	case rd.addresses:
		fmt.Fprintf(w.out, "ingress %s\n", andAddrs(porticov1.IngressAddrs(want)))
		if pool, ok := want.Annotations[porticov1.AnnotationAllocatedFromPool]; ok {
			fmt.Fprintf(w.out, "annotation allocated-from-pool=%s\n", pool)
		}
		if key, ok := want.Annotations[porticov1.AnnotationAllocatedSharingKey]; ok {
			fmt.Fprintf(w.out, "annotation allocated-sharing-key=%s\n", key)
		}
		fallthrough
	default:
		for _, c := range rd.Conditions {
			fmt.Fprintln(w.out, condLine(c))
		}
		for _, t := range rd.Remove {
			fmt.Fprintf(w.out, "remove %s\n", strings.TrimPrefix(t, "portico.dev/"))
		}
		if rd.dropPool {
			fmt.Fprintln(w.out, "remove annotation allocated-from-pool")
		}
	}
	for _, c := range rd.Tell {
		n := EventOf(c)
		fmt.Fprintf(w.out, "event %s %s: %s\n", n.Type, n.Reason, n.Note)
	}
	for _, p := range rd.PoolTell {
		n := p.Notice()
		fmt.Fprintf(w.out, "event on pool %s %s %s: %s\n", p.Pool, n.Type, n.Reason, n.Note)
	}
	if pools := slices.Compact(slices.Sorted(slices.Values(rd.Pools))); len(pools) > 0 {
		fmt.Fprintf(w.out, "pools %s\n", strings.Join(pools, ","))
	}
	if len(rd.Retry) > 0 {
		fmt.Fprintf(w.out, "retry %s\n", strings.Join(rd.Retry, ","))
	}
	if svc != nil {
		w.store(svc, rd)
	}
}

// store applies a decision to the stored Service, as its write would, at the world's time.
func (w *world) store(svc *corev1.Service, rd Ready) {
	for i := range rd.Conditions {
		rd.Conditions[i].LastTransitionTime = metav1.NewTime(w.now)
	}
	rd.Apply(svc)
}

func condLine(c metav1.Condition) string {
	return fmt.Sprintf("%s=%s %s: %s", strings.TrimPrefix(c.Type, "portico.dev/"), c.Status, c.Reason, c.Message)
}

// speaker sets a node's speaker report: its MAC, the Service whose addresses it announces
// over L2, and a self-check of a Service's first address that heard mac.
func (w *world) speaker(node, mac, announces, heard, subnets, dataPath string) {
	s := porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if dataPath != "" { // a lack, by its reason: the speaker's message is the reason's
		s.Status.Conditions = []metav1.Condition{{Type: porticov1.ConditionDataPath, Status: metav1.ConditionFalse, Reason: dataPath, Message: "lacks " + dataPath}}
	}
	switch subnets {
	case "": // not reported: answers anywhere
	case "none":
		s.Status.Subnets = []string{}
	default:
		s.Status.Subnets = strings.Split(subnets, ",")
	}
	if mac != "" {
		s.Status.HardwareAddrs = []string{mac}
	}
	if svc := w.svcs["default/"+announces]; svc != nil {
		for _, ip := range porticov1.IngressAddrs(svc) {
			s.Status.Announcements = append(s.Status.Announcements, porticov1.Announcement{IP: ip.String(),
				Service: "default/" + announces, Protocol: porticov1.ProtocolL2, Interfaces: []string{"eth0"}})
		}
	}
	if name, mac, ok := strings.Cut(heard, ":"); ok {
		if ips := porticov1.IngressAddrs(w.svcs["default/"+name]); len(ips) > 0 {
			s.Status.SelfChecks = []porticov1.SelfCheck{{IP: ips[0].String(), MACs: []string{mac}}}
		}
	}
	byName := map[string]porticov1.Speaker{}
	for _, o := range w.facts.Speakers {
		byName[o.Name] = o
	}
	byName[node] = s
	w.facts.Speakers = nil
	for _, n := range slices.Sorted(maps.Keys(byName)) {
		w.facts.Speakers = append(w.facts.Speakers, byName[n])
	}
	w.facts.Subnets = rules.SubnetsOf(w.facts.Speakers) // as the controller's liveness count sets them
}

// request is the allocator request for svc, as the Service reconciler builds it.
func (w *world) request(svc *corev1.Service) (allocator.Request, error) {
	var selected []string
	for i := range w.pools {
		if sa := w.pools[i].Spec.ServiceAllocation; sa != nil && selects(sa, svc, nil) {
			selected = append(selected, w.pools[i].Name)
		}
	}
	return buildRequest(svc, selected)
}

// restart is a new controller: a book rebuilt from what the Services' status lists, then
// from the holds the pools' status lists (as the pools command last stored them).
func (w *world) restart() {
	w.book = NewBook()
	w.book.SetPools(w.pools)
	var stored []Stored
	for _, key := range slices.Sorted(maps.Keys(w.svcs)) {
		svc := w.svcs[key]
		if rules.Handles(svc, porticov1.DefaultLoadBalancerClass, true) && len(porticov1.IngressAddrs(svc)) > 0 {
			req, _ := w.request(svc)
			stored = append(stored, StoredOf(svc, req))
		}
	}
	refused := w.book.Rebuild(stored, false)
	dropped := w.book.RestoreHolds(w.pools)
	fmt.Fprintf(w.out, "rebuilt: %d Services, %d refused; holds dropped: %d\n", len(stored)-len(refused), len(refused), len(dropped))
	var pending []*Asked // in the informers' order, by name: the backlog is served oldest first
	for _, key := range slices.Sorted(maps.Keys(w.svcs)) {
		svc := w.svcs[key]
		if rules.Handles(svc, porticov1.DefaultLoadBalancerClass, true) && len(porticov1.IngressAddrs(svc)) == 0 && svc.DeletionTimestamp == nil {
			pending = append(pending, AskedOf(svc, nil))
		}
	}
	w.book.Await(pending)
	w.printServed(w.book.ServeBacklog(w.pools))
}

// printServed tells which waiting Services the backlog gave addresses, in the order served.
func (w *world) printServed(served []string) {
	if len(served) > 0 {
		fmt.Fprintf(w.out, "backlog served %s\n", strings.Join(served, ","))
	}
}

// poolStatus runs the pool reconciler's decision for each named pool, prints what its write
// changes and the events it tells, and stores it.
func (w *world) poolStatus(names []string) {
	verdict := JudgeProbes(w.facts.Speakers, w.pools, w.now)
	look := w.book.LookAtPools(verdict.Answerers(), w.now)
	if len(look.Retry) > 0 {
		fmt.Fprintf(w.out, "retry %s\n", strings.Join(look.Retry, ","))
	}
	for _, name := range names {
		i := slices.IndexFunc(w.pools, func(p porticov1.IPAddressPool) bool { return p.Name == name })
		in := PoolSeen{Pool: &w.pools[i], Pools: w.pools, Facts: w.book.PoolFacts(name), Proxies: verdict.Proxies[name], Now: w.now}
		in.Facts.InUse = w.book.InUseIn(name, verdict.InUse)
		in.Shared, in.SharedKnown = w.desk.Shared(name)
		rd := Pool(in)
		if rd.Want == nil {
			fmt.Fprintf(w.out, "%s: no write\n", name)
			continue
		}
		st := rd.Want.Status
		fmt.Fprintf(w.out, "%s: assigned %d, available %s, waiting %d, next %s\n", name, st.Assigned, st.Available, st.Waiting, strings.Join(st.NextAddresses, ","))
		for _, u := range st.InUse {
			fmt.Fprintf(w.out, "  in use %s by %s\n", u.Address, u.MAC)
		}
		for _, p := range st.ProxyAnswerers {
			fmt.Fprintf(w.out, "  proxy answerer %s for %d\n", p.MAC, p.Addresses)
		}
		for _, c := range st.Conditions {
			if old := findCondition(w.pools[i].Status.Conditions, c.Type); old == nil || old.Message != c.Message || old.Status != c.Status {
				fmt.Fprintf(w.out, "  %s\n", condLine(c))
			}
		}
		for _, n := range rd.Tell {
			fmt.Fprintf(w.out, "event %s %s: %s\n", n.Type, n.Reason, n.Note)
		}
		w.pools[i] = *rd.Want
	}
	w.facts.Pools = w.pools
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// foreign gives node a live speaker's report of foreign hosts answering for addresses.
func (w *world) foreign(node string, answers []datadriven.CmdArg) {
	s := porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: node}}
	s.Status.Conditions = []metav1.Condition{{Type: porticov1.ConditionReady, Status: metav1.ConditionTrue}}
	s.Status.ProbedAt = &metav1.Time{Time: w.now}
	for _, a := range answers {
		ip, mac, _ := strings.Cut(a.Key, "/")
		s.Status.ForeignAnswers = append(s.Status.ForeignAnswers, porticov1.ForeignAnswer{IP: ip, MAC: mac, Interface: "eth0", Since: metav1.Time{Time: w.now}})
	}
	w.facts.Speakers = append(slices.DeleteFunc(w.facts.Speakers, func(o porticov1.Speaker) bool { return o.Name == node }), s)
}

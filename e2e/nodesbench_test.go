package e2e

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker"
	"github.com/portico-lb/portico/speaker/kubeapi"
	"github.com/portico-lb/portico/speaker/membership"
)

// nodesSimPort is the memberlist port of the nodes benchmark's real speakers (simPort's
// neighbour, so the two benchmarks can run at once).
const nodesSimPort = 27948

// fleet is one side of the nodes benchmark on a cluster: how it brings up a node's watches
// (the whole fleet at first, one more on a join) and what it waits for after a change.
type fleet struct {
	name  string
	up    func(b *testing.B, cp *controlplane.ControlPlane, nodes []string) []*hollowNode
	join  func(b *testing.B, cp *controlplane.ControlPlane, node string) *hollowNode
	after func(b *testing.B, cp *controlplane.ControlPlane, addrs []string)
	// down removes what the fleet wrote once its watches are gone (nil: nothing), so that the
	// next side starts as a fresh install; services numbers the Services its changes create.
	down     func(b *testing.B, cp *controlplane.ControlPlane)
	services int
}

// sideCost is what one side cost the apiserver: an idle minute, and each kind of change (the
// median over the rounds, the idle cost of the same span taken off).
type sideCost struct {
	idleMinute              apiTotals
	service, slice, joinOne apiTotals
}

// BenchmarkNodes runs N hollow nodes (PORTICO_BENCH_NODES, comma-separated, default
// 100,500,1000) against a real apiserver: first as kube-proxy (the floor every cluster pays),
// then as Portico's speakers (a few real speakers, the rest hollow: the speaker's own watches
// and Lease, no plan). For each it measures the apiserver's CPU and bytes sent per idle minute,
// per Service change, per EndpointSlice change and per node join; the report gives the
// speakers against the floor, both from one run. With PORTICO_BENCH_NODES_LEASE_BEFORE (a
// duration, 5s before issue 47) it measures, between the two, the speakers renewing their
// Leases that often too: before and after the change of the renewal in one run.
func BenchmarkNodes(b *testing.B) {
	counts := envCounts(b, "PORTICO_BENCH_NODES", []int{100, 500, 1000}, 3, math.MaxInt32, false)
	services := envSize(b, "PORTICO_BENCH_NODES_SERVICES", 100, 1)
	idle := time.Duration(envSize(b, "PORTICO_BENCH_NODES_IDLE_S", 60, 5)) * time.Second
	rounds := envSize(b, "PORTICO_BENCH_NODES_ROUNDS", 3, 1)
	real := envSize(b, "PORTICO_BENCH_NODES_REAL", 3, 1)
	before := envDuration(b, "PORTICO_BENCH_NODES_LEASE_BEFORE")
	var rep nodesReport
	for _, n := range counts {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for b.Loop() {
				cp := startControlPlane(b)
				nodes := seedCluster(b, cp, n, services, real)
				floor := measureSide(b, cp, kubeProxyFleet(), nodes, idle, rounds)
				if before > 0 {
					old := measureSide(b, cp, speakerFleet("speakers-before", real, before, 40000), nodes, idle, rounds)
					rep.add(n, fmt.Sprintf("speakers, Lease every %s", before), floor, old)
				}
				portico := measureSide(b, cp, speakerFleet("speakers", real, speaker.DefaultLeaseRenew, 30000), nodes, idle, rounds)
				rep.add(n, fmt.Sprintf("speakers, Lease every %s", speaker.DefaultLeaseRenew), floor, portico)
				rep.metrics(b, n, floor, portico)
				rep.save(b) // after each node count: a larger one may not hold on the machine
				stopControlPlane(b, cp)
			}
		})
	}
	fmt.Print(rep.String())
}

// envDuration is the duration the environment variable name holds; zero when unset.
func envDuration(b *testing.B, name string) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a duration above zero", name, s)
	}
	return d
}

// seedCluster makes n Nodes (the first real ones with loopback addresses their speakers
// gossip on), a pool and an L2Advertisement, and services Services with an address and an
// EndpointSlice each.
func seedCluster(b *testing.B, cp *controlplane.ControlPlane, n, services, real int) []string {
	createPool(b, cp, "nodes", "198.18.0.0/16")
	must(b, cp.Client.Create(context.Background(), &porticov1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "all"}}))
	nodes := make([]string, n)
	eachOf(b, n, func(i int) error {
		nodes[i] = fmt.Sprintf("node-%04d", i)
		addr := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		if i < real {
			addr = simAddr(i)
		}
		return createNode(cp, nodes[i], addr)
	})
	write := floorWrite(cp)
	eachOf(b, services, func(i int) error {
		svc := benchService("default", i)
		if err := cp.Client.Create(context.Background(), svc); err != nil {
			return err
		}
		if err := write(svc, i); err != nil {
			return err
		}
		return cp.Client.Create(context.Background(), benchSlice(svc, nodes[i%n], i))
	})
	return nodes
}

func createNode(cp *controlplane.ControlPlane, name string, addr netip.Addr) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := cp.Client.Create(context.Background(), node); err != nil {
		return err
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr.String()}}
	return cp.Client.Status().Update(context.Background(), node)
}

// eachOf calls fn(0..n-1) from 8 goroutines, failing on the first error.
func eachOf(b *testing.B, n int, fn func(i int) error) {
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	must(b, failed)
}

// measureSide brings up the fleet on every node, measures an idle span and rounds of each kind
// of change, and takes the fleet down again (waiting until its watches are gone).
func measureSide(b *testing.B, cp *controlplane.ControlPlane, f fleet, nodes []string, idle time.Duration, rounds int) sideCost {
	before := totalWatches(b, cp)
	hollow := f.up(b, cp, nodes)
	waitSynced(b, f.name, hollow)
	start := settle(b, cp, f.name+"'s start")
	time.Sleep(idle) // the idle span measured, not synchronisation
	quiet := readAPITotals(b, cp).sub(start)
	perSecond := quiet.scale(1 / quiet.seconds())
	var c sideCost
	c.idleMinute = perSecond.scale(60)
	svcs, slices, joins := make([]apiTotals, rounds), make([]apiTotals, rounds), make([]apiTotals, rounds)
	for r := range rounds {
		svcs[r] = change(b, cp, perSecond, 10, func(i int) { serviceChange(b, cp, f, r*10+i) })
		slices[r] = change(b, cp, perSecond, 10, func(i int) { sliceChange(b, cp, r*10+i) })
		joins[r] = change(b, cp, perSecond, 3, func(i int) {
			hollow = append(hollow, joinNode(b, cp, f, fmt.Sprintf("%s-join-%d", f.name, r*3+i)))
		})
	}
	c.service, c.slice, c.joinOne = medianTotals(svcs), medianTotals(slices), medianTotals(joins)
	for _, h := range hollow {
		h.stop()
	}
	waitFor(b, f.name+"'s watches to close", 5*time.Minute, atMostEvery(time.Second, func() bool { return totalWatches(b, cp) <= before }))
	if f.down != nil {
		f.down(b, cp)
	}
	return c
}

// change makes n changes one after another, waits for the apiserver to settle after them, and
// returns the cost of one, the idle cost of the span taken off.
func change(b *testing.B, cp *controlplane.ControlPlane, idlePerSecond apiTotals, n int, one func(i int)) apiTotals {
	start := readAPITotals(b, cp)
	for i := range n {
		one(i)
	}
	spent := settle(b, cp, "the changes").sub(start)
	return spent.minus(idlePerSecond.scale(spent.seconds())).scale(1 / float64(n))
}

func serviceChange(b *testing.B, cp *controlplane.ControlPlane, f fleet, i int) {
	svc := benchService("default", f.services+i)
	must(b, cp.Client.Create(context.Background(), svc))
	must(b, floorWrite(cp)(svc, f.services+i))
	f.after(b, cp, []string{floorAddr(f.services + i)})
}

// sliceChange takes Service i's endpoint out of service or back in.
func sliceChange(b *testing.B, cp *controlplane.ControlPlane, i int) {
	var es discoveryv1.EndpointSlice
	must(b, cp.Client.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: fmt.Sprintf("svc-%05d-x", i)}, &es))
	es.Endpoints[0].Conditions.Ready = ptr.To(!*es.Endpoints[0].Conditions.Ready)
	must(b, cp.Client.Update(context.Background(), &es))
}

// joinNode adds a Node and the fleet's watches on it, and waits until they have listed.
func joinNode(b *testing.B, cp *controlplane.ControlPlane, f fleet, name string) *hollowNode {
	must(b, createNode(cp, name, netip.MustParseAddr("10.255.0.1")))
	h := f.join(b, cp, name)
	waitSynced(b, name, []*hollowNode{h})
	return h
}

func waitSynced(b *testing.B, what string, hs []*hollowNode) {
	for _, h := range hs {
		if !h.synced() {
			b.Fatalf("%s: a node's watches never listed", what)
		}
	}
}

func totalWatches(b *testing.B, cp *controlplane.ControlPlane) float64 {
	s := 0.0
	for _, v := range watchesOf(b, cp) {
		s += v
	}
	return s
}

// medianTotals is the round with the median apiserver CPU.
func medianTotals(ts []apiTotals) apiTotals {
	s := slices.Clone(ts)
	slices.SortFunc(s, func(a, b apiTotals) int { return cmpFloat(a.apiserverCPU, b.apiserverCPU) })
	return s[len(s)/2]
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// kubeProxyFleet is the floor: kube-proxy's watches on every node, nothing written.
func kubeProxyFleet() fleet {
	return fleet{name: "kube-proxy", services: 20000,
		up: func(b *testing.B, cp *controlplane.ControlPlane, nodes []string) []*hollowNode {
			var hs []*hollowNode
			for _, n := range nodes {
				hs = append(hs, startKubeProxy(b, cp, n))
			}
			return hs
		},
		join: func(b *testing.B, cp *controlplane.ControlPlane, node string) *hollowNode {
			return startKubeProxy(b, cp, node)
		},
		after: func(*testing.B, *controlplane.ControlPlane, []string) {},
	}
}

// speakerFleet is Portico: real speakers on the first nodes (the real code from the API down
// to the plan, the network recorded, gossiping on loopback), which write the Speaker objects,
// events and Leases a change causes; a hollow speaker on every other node, with the Speaker
// object and Lease an idle speaker has. Every speaker renews its Lease every renew.
func speakerFleet(name string, real int, renew time.Duration, services int) fleet {
	return fleet{name: name, services: services,
		up: func(b *testing.B, cp *controlplane.ControlPlane, nodes []string) []*hollowNode {
			real := min(real, len(nodes))
			template, speakers := startRealSpeakers(b, cp, nodes[:real], renew)
			hollowMatchesReal(b, cp, real)
			hs := []*hollowNode{speakers}
			eachOf(b, len(nodes)-real, func(i int) error { return hollowObjects(cp, template, nodes[real+i], renew) })
			for _, n := range nodes[real:] {
				hs = append(hs, startHollowSpeaker(b, cp, n, renew))
			}
			return hs
		},
		join: func(b *testing.B, cp *controlplane.ControlPlane, node string) *hollowNode {
			var template porticov1.Speaker
			must(b, cp.Client.Get(context.Background(), types.NamespacedName{Name: "node-0000"}, &template))
			must(b, hollowObjects(cp, &template, node, renew))
			return startHollowSpeaker(b, cp, node, renew)
		},
		down: func(b *testing.B, cp *controlplane.ControlPlane) {
			must(b, cp.Client.DeleteAllOf(context.Background(), &porticov1.Speaker{}))
			must(b, cp.Client.DeleteAllOf(context.Background(), &coordinationv1.Lease{}, client.InNamespace("default"),
				client.HasLabels{rules.SpeakerLeaseLabel}))
		},
		after: func(b *testing.B, cp *controlplane.ControlPlane, addrs []string) {
			waitFor(b, "a real speaker to list the new address", time.Minute, atMostEvery(100*time.Millisecond, func() bool {
				return listed(b, cp, addrs)
			}))
		},
	}
}

// hollowObjects gives a hollow node what an idle speaker writes: its Speaker object, with the
// status of template (a real speaker's) but no addresses, and its Lease.
func hollowObjects(cp *controlplane.ControlPlane, template *porticov1.Speaker, node string, renew time.Duration) error {
	ctx := context.Background()
	sp := &porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := cp.Client.Create(ctx, sp); err != nil {
		return err
	}
	sp.Status = *template.Status.DeepCopy()
	sp.Status.Announcements, sp.Status.L2Announcements = nil, 0
	if err := cp.Client.Status().Update(ctx, sp); err != nil {
		return err
	}
	key := leaseKey(node)
	now := metav1.NewMicroTime(time.Now())
	return cp.Client.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
		Labels: map[string]string{rules.SpeakerLeaseLabel: ""}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), RenewTime: &now, AcquireTime: &now,
			LeaseDurationSeconds: ptr.To(int32(speaker.LeaseDuration(renew) / time.Second))}})
}

// listed says whether some Speaker object lists every one of addrs.
func listed(b *testing.B, cp *controlplane.ControlPlane, addrs []string) bool {
	var sps porticov1.SpeakerList
	must(b, cp.Client.List(context.Background(), &sps))
	seen := map[string]bool{}
	for _, sp := range sps.Items {
		for _, a := range sp.Status.Announcements {
			seen[a.IP] = true
		}
	}
	for _, a := range addrs {
		if !seen[a] {
			return false
		}
	}
	return true
}

// startRealSpeakers runs the real speaker code for nodes (each its own client, connection,
// cache and metrics; one gossip group on loopback) until the benchmark ends, waits until they
// have joined and written their Speaker objects, and returns the first one's and what stops them.
func startRealSpeakers(b *testing.B, cp *controlplane.ControlPlane, nodes []string, renew time.Duration) (*porticov1.Speaker, *hollowNode) {
	ctx, cancel := context.WithCancel(context.Background())
	var groups []*membership.Group
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			for _, g := range groups {
				_ = g.Leave(time.Second)
			}
		})
	}
	b.Cleanup(stop)
	for i, name := range nodes {
		cl, err := kubeapi.New(ownConnection(cp.Config))
		must(b, err)
		c := kubeapi.NewCache(cl, speaker.TrimForCache)
		rec := &networkRecorder{}
		s := speaker.New(speaker.Options{Node: name, LBClass: porticov1.DefaultLoadBalancerClass, Cache: c, Client: cl,
			MLPort: nodesSimPort, Announce: l2Side{rec}, BGP: bgpSide{rec}, LeaseNamespace: "default", LeaseRenew: renew,
			Metrics: speaker.NewMetrics(prometheus.NewRegistry()), Log: logr.Discard()})
		s.Group, err = membership.Start(membership.Config{Name: name, BindAddr: simAddr(i).String(), BindPort: nodesSimPort,
			Detection: membership.DefaultDetection, Admit: s.Admit})
		must(b, err)
		groups = append(groups, s.Group)
		c.Start(ctx)
		go func() { _ = s.Start(ctx) }()
	}
	var first porticov1.Speaker
	waitFor(b, "the real speakers to join and write their Speaker objects", 2*time.Minute, func() bool {
		for _, g := range groups {
			if len(g.Alive()) != len(nodes) {
				return false
			}
		}
		var sps porticov1.SpeakerList
		return cp.Client.List(ctx, &sps) == nil && len(sps.Items) == len(nodes) &&
			cp.Client.Get(ctx, types.NamespacedName{Name: nodes[0]}, &first) == nil
	})
	return &first, &hollowNode{stop: stop, synced: func() bool { return true }}
}

// hollowMatchesReal fails the benchmark unless the real speakers watch exactly the kinds a
// hollow speaker watches (speakerKinds): a speaker that watched more would cost more than the
// hollow ones measured.
func hollowMatchesReal(b *testing.B, cp *controlplane.ControlPlane, real int) {
	var want []string
	for _, k := range speakerKinds {
		want = append(want, k.resource)
	}
	slices.Sort(want)
	var got []string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, time.Minute, true, func(context.Context) (bool, error) {
		got = nil
		for r, n := range watchesOf(b, cp) {
			if n >= float64(real) {
				got = append(got, r)
			}
		}
		slices.Sort(got)
		return slices.Equal(got, want), nil
	})
	if err != nil {
		b.Fatalf("the real speakers watch %v; a hollow speaker watches %v (speakerKinds)", got, want)
	}
}

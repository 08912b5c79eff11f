package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/speaker"
	"github.com/portico-lb/portico/speaker/kubeapi"
	"github.com/portico-lb/portico/speaker/l2"
	"github.com/portico-lb/portico/speaker/membership"
	"github.com/portico-lb/portico/speaker/plan"
)

// simPort is the memberlist port of the simulated nodes, each on its own loopback address
// (127.0.1.x, routed to lo without adding anything), away from the unit tests' 17946-17950;
// eventsSimPort is TestSpeakerEventsTrail's, so the test and the benchmark can run at once.
const (
	simPort       = 27946
	eventsSimPort = 27947
)

// networkRecorder is a simulated node's network side: it answers and advertises nothing (the
// API load is what the simulation measures), says every wanted address is answered on eth0
// and keeps the wanted BGP sessions, as Established.
type networkRecorder struct {
	mu    sync.Mutex
	peers map[string]plan.SessionState
}

// l2Side and bgpSide are the recorder as the speaker's Announcer and Router.
type (
	l2Side  struct{ *networkRecorder }
	bgpSide struct{ *networkRecorder }
)

func (r l2Side) Set(want l2.Want) (map[netip.Addr][]string, []error) {
	out := make(map[netip.Addr][]string, len(want))
	for ip := range want {
		out[ip] = []string{"eth0"}
	}
	return out, nil
}

func (r l2Side) Reannounce()                       {}
func (r l2Side) AnnounceOnce([]netip.Addr) []error { return nil }
func (r l2Side) Silence()                          {}
func (r l2Side) Close() error                      { return nil }
func (r l2Side) Interfaces() []l2.Verdict          { return nil }
func (r bgpSide) Close()                           {}

// SolicitNeighbour does nothing: the simulated nodes share loopback.
func (r l2Side) SolicitNeighbour(netip.Addr) (bool, error) { return false, nil }

// Apply takes every wanted session as Established at once (a fixed time, so a plan's
// sessions never rewrite the status by themselves).
func (r bgpSide) Apply(_ context.Context, d plan.BGP) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.peers = map[string]plan.SessionState{}
	for name, p := range d.Peers {
		r.peers[name] = plan.SessionState{Peer: name, Address: p.Address, State: "Established", Since: time.Unix(1_800_000_000, 0)}
	}
	return nil
}

// SetOnChange: the sessions come up with the plan and never change by themselves.
func (bgpSide) SetOnChange(func(before, after plan.SessionState)) {}

func (r bgpSide) States() map[string]plan.SessionState {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]plan.SessionState, len(r.peers))
	for k, v := range r.peers {
		out[k] = v
	}
	return out
}

// simulation is n speakers of the real speaker code in this process, against a real
// apiserver: one shared informer cache (the simulation's only shortcut on the read side), a
// gossip group on loopback, and each its own API client (as a node has: no client-side rate
// limit, as the speaker binary's config has), event recorder and network recorder.
type simulation struct {
	cp      *controlplane.ControlPlane
	nodes   []string
	metrics []*prometheus.Registry // each speaker's
}

func startSimulation(b testing.TB, cp *controlplane.ControlPlane, n int, bgpMode bool, port int) *simulation {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	sim := &simulation{cp: cp}
	createPool(b, cp, "sim", "198.18.0.0/16")
	if bgpMode {
		must(b, cp.Client.Create(ctx, &porticov1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "tor"},
			Spec: porticov1.BGPPeerSpec{MyASN: 64513, PeerASN: 64512, PeerAddress: "127.0.0.254"}}))
		must(b, cp.Client.Create(ctx, &porticov1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "all"}}))
	} else {
		must(b, cp.Client.Create(ctx, &porticov1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "all"}}))
	}
	for i := range n {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%03d", i)}}
		must(b, cp.Client.Create(ctx, node))
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: simAddr(i).String()}}
		must(b, cp.Client.Status().Update(ctx, node))
		sim.nodes = append(sim.nodes, node.Name)
	}
	shared, err := kubeapi.New(cp.Config)
	must(b, err)
	c := kubeapi.NewCache(shared, speaker.TrimForCache)
	c.Start(ctx)
	var groups []*membership.Group
	for i, name := range sim.nodes {
		rec := &networkRecorder{}
		reg := prometheus.NewRegistry()
		sim.metrics = append(sim.metrics, reg)
		cfg := rest.CopyConfig(cp.Config)
		cfg.QPS = -1 // ctrl.GetConfig's setting in the speaker binary
		cl, err := kubeapi.New(cfg)
		must(b, err)
		s := speaker.New(speaker.Options{Node: name, LBClass: porticov1.DefaultLoadBalancerClass, Cache: c, Client: cl,
			MLPort: port, Announce: l2Side{rec}, BGP: bgpSide{rec},
			Metrics: speaker.NewMetrics(reg), Log: logr.Discard()})
		// memberlist's LAN timing, not Portico's faster default: a hundred groups share two
		// cores here, and a false member loss would move addresses (and their events), which
		// is not the load one Service change causes.
		s.Group, err = membership.Start(membership.Config{Name: name, BindAddr: simAddr(i).String(), BindPort: port,
			Detection: membership.Detection{ProbeInterval: time.Second, ProbeTimeout: 500 * time.Millisecond, SuspicionMult: 4}, Admit: s.Admit})
		must(b, err)
		groups = append(groups, s.Group)
		go func() { _ = s.Start(ctx) }()
	}
	b.Cleanup(func() {
		cancel()
		for _, g := range groups {
			_ = g.Leave(time.Second)
		}
	})
	waitFor(b, fmt.Sprintf("%d speakers in one gossip group, each with a Speaker object", n), 5*time.Minute, func() bool {
		for _, g := range groups {
			if len(g.Alive()) != n {
				return false
			}
		}
		var sps porticov1.SpeakerList
		return cp.Client.List(ctx, &sps) == nil && len(sps.Items) == n
	})
	return sim
}

func simAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 1, byte(i + 1)}) }

// reported counts the addresses the Speaker objects list (each once, whoever lists it).
func (sim *simulation) reported(b *testing.B) int {
	var sps porticov1.SpeakerList
	if err := sim.cp.Client.List(context.Background(), &sps); err != nil {
		return -1
	}
	seen := map[string]bool{}
	for _, sp := range sps.Items {
		for _, a := range sp.Status.Announcements {
			seen[a.IP] = true
		}
	}
	return len(seen)
}

// memberLosses counts the member losses all the simulated speakers saw.
func (sim *simulation) memberLosses(b *testing.B) float64 {
	n := 0.0
	sim.each(b, "portico_memberlist_members_lost_total", func(m *dto.Metric) { n += m.GetCounter().GetValue() })
	return n
}

// reconciles sums the simulated speakers' reconciles: how many, and their seconds.
func (sim *simulation) reconciles(b *testing.B) (count, seconds float64) {
	sim.each(b, "portico_speaker_reconcile_seconds", func(m *dto.Metric) {
		count += float64(m.GetHistogram().GetSampleCount())
		seconds += m.GetHistogram().GetSampleSum()
	})
	return count, seconds
}

// each calls fn with every simulated speaker's samples of the metric name.
func (sim *simulation) each(b testing.TB, name string, fn func(*dto.Metric)) {
	for _, reg := range sim.metrics {
		families, err := reg.Gather()
		must(b, err)
		for _, f := range families {
			if f.GetName() == name {
				for _, m := range f.GetMetric() {
					fn(m)
				}
			}
		}
	}
}

// speakerWrites are the writes the speakers make: their Speaker objects and their events.
func speakerWrites(after, before map[string]float64) (status, events float64) {
	return delta(after, before, "PUT speakers/status", "POST speakers", "PATCH speakers/status"),
		delta(after, before, "POST events", "PATCH events")
}

// quiet waits until the speakers' write counters have not moved for three seconds (the status
// writer's pace is one write per 500 ms, and events trail a second without changes or status
// writes), so the writes a change causes are all counted, and returns them.
func quiet(b *testing.B, sim *simulation, when string) map[string]float64 {
	cp := sim.cp
	last := apiWrites(b, cp)
	since := time.Now()
	b.Logf("%s: %v member losses so far", when, sim.memberLosses(b))
	waitFor(b, "the speakers' writes to settle "+when, 2*time.Minute, atMostEvery(200*time.Millisecond, func() bool {
		now := apiWrites(b, cp)
		if s, e := speakerWrites(now, last); s != 0 || e != 0 {
			last, since = now, time.Now()
		}
		return time.Since(since) >= 3*time.Second
	}))
	return last
}

// atMostEvery runs cond at most once per d (false in between), so polling does not load the
// apiserver whose load is being measured.
func atMostEvery(d time.Duration, cond func() bool) func() bool {
	var at time.Time
	return func() bool {
		if time.Since(at) < d {
			return false
		}
		at = time.Now()
		return cond()
	}
}

// BenchmarkSpeakerScale runs the real speaker code as 3, 10 and 30 nodes in this process
// (PORTICO_BENCH_SCALE_NODES, comma-separated, e.g. 3,10,30,100) against a real apiserver, in L2 and in BGP: n
// Services (PORTICO_BENCH_SCALE_SERVICES, default 5000) get addresses in a burst, then single
// Services are added one at a time. It reports the speakers' writes per Service and the time
// until the Speaker objects list every address; the goal is that neither grows with nodes.
func BenchmarkSpeakerScale(b *testing.B) {
	services := envSize(b, "PORTICO_BENCH_SCALE_SERVICES", 5000, 1)
	counts := envCounts(b, "PORTICO_BENCH_SCALE_NODES", []int{3, 10, 30}, 1, 250, false)
	const singles = 10
	var rep strings.Builder
	fmt.Fprintf(&rep, "| mode | nodes | burst of %d: converged (first create → every address listed) | after the last create | Speaker writes / Service | events / Service | one more Service: Speaker writes | events | a speaker's reconcile (mean, single Services) | member losses seen |\n|---|---|---|---|---|---|---|---|---|---|\n", services)
	for _, mode := range []string{"L2", "BGP"} {
		for _, n := range counts {
			b.Run(fmt.Sprintf("%s/nodes=%d", mode, n), func(b *testing.B) {
				for b.Loop() {
					cp := startControlPlane(b)
					sim := startSimulation(b, cp, n, mode == "BGP", simPort)
					ns := "default"
					before := quiet(b, sim, "before the burst")
					start := time.Now()
					create(b, cp, ns, services, floorWrite(cp))
					created := time.Now()
					waitFor(b, fmt.Sprintf("%d addresses listed by the Speakers", services), 30*time.Minute, atMostEvery(100*time.Millisecond, func() bool {
						return sim.reported(b) == services
					}))
					converged := time.Now()
					after := quiet(b, sim, "after the burst")
					st, ev := speakerWrites(after, before)
					n0, s0 := sim.reconciles(b)
					write := floorWrite(cp)
					for i := range singles {
						svc := benchService(ns, services+i)
						must(b, cp.Client.Create(context.Background(), svc))
						must(b, write(svc, services+i))
						waitFor(b, "the new address listed", time.Minute, atMostEvery(100*time.Millisecond, func() bool { return sim.reported(b) == services+i+1 }))
					}
					last := quiet(b, sim, "after the single Services")
					st1, ev1 := speakerWrites(last, after)
					n1, s1 := sim.reconciles(b)
					perChange := (s1 - s0) / max(n1-n0, 1)
					b.ReportMetric(converged.Sub(start).Seconds(), "converged-s")
					b.ReportMetric(converged.Sub(created).Seconds(), "s-after-last-create")
					b.ReportMetric(sim.memberLosses(b), "member-losses")
					b.ReportMetric(st/float64(services), "speaker-writes/svc")
					b.ReportMetric(ev/float64(services), "events/svc")
					b.ReportMetric(st1/singles, "speaker-writes/change")
					b.ReportMetric(ev1/singles, "events/change")
					b.ReportMetric(perChange*1000, "ms/reconcile")
					fmt.Fprintf(&rep, "| %s | %d | %.1f s | %.1f s | %.3f | %.3f | %.1f | %.1f | %.2f ms | %.0f |\n", mode, n, converged.Sub(start).Seconds(),
						converged.Sub(created).Seconds(), st/float64(services), ev/float64(services), st1/singles, ev1/singles, perChange*1000, sim.memberLosses(b))
				}
			})
		}
	}
	fmt.Print(rep.String())
	if out := os.Getenv("PORTICO_BENCH_SCALE_OUT"); out != "" {
		must(b, os.WriteFile(out, []byte(rep.String()), 0o644))
	}
}

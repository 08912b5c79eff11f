package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/internal/netlab"
)

// The lab's Prometheus scrapes every second and evaluates the rules every half second; the
// rules it loads are the shipped ones with every duration divided by durationScale
// (scaledRules), so a `for: 5m` waits 15 s (docs/monitoring.md says so).
const (
	scrapeInterval = time.Second
	scrapeTimeout  = scrapeInterval * 9 / 10
	evalInterval   = 500 * time.Millisecond
	durationScale  = 20
	monitoringNS   = "portico-system"
)

// monitoredLab is a lab (three speakers with Leases and the self-check every 2 s, two
// controller replicas with leader election, bird peered with every node with BFD) with pools
// and Services of every kind, scraped by a real Prometheus that evaluates Portico's alerts.
type monitoredLab struct {
	e       *l2Env
	prom    *netlab.Prometheus
	bird    *netlab.Router
	fors    map[string]time.Duration // each alert's scaled for:
	window  time.Duration            // the longest scaled range an alert counts over (predict_linear's lookback aside)
	watch   *alertWatch
	failIP  netip.Addr // an L2 address node-c answers for (it fails over when node-c dies)
	otherIP netip.Addr // an L2 address node-a answers for
	movedIP netip.Addr // an L2 address node-b answers for (it moves when node-b restarts)
}

// webPool is the L2 pool the lab's Services announce from; the home-lab pool is there to be
// exhausted, the routed one is advertised over BGP.
var webPool = netip.MustParsePrefix("198.51.100.144/28")

func startMonitoredLab(t *testing.T, e *l2Env) *monitoredLab {
	ctx := context.Background()
	all := []string{"node-a", "node-b", "node-c"}
	must(t, e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: monitoringNS}}))
	e.restartSpeakers([]string{"--namespace", monitoringNS, "--lease-renew-interval", "1s", "--self-check-interval", "2s"})
	m := &monitoredLab{e: e}
	tor := e.Routers[0]
	m.bird = startBird(t, tor.NS, birdBFDConfig(tor.IPv4.Addr(), e.Nodes))
	e.createBFDProfile("fast", 200, 5)
	peer := bgpPeer("tor", tor.IPv4.Addr(), clusterASN, routerASN)
	peer.Spec.BFDProfile = "fast"
	e.createObject(peer)

	args := []string{"--leader-elect", "--leader-election-namespace", monitoringNS, "--speaker-namespace", monitoringNS, "--news-after", "1s"}
	controllers := []string{startController(t, e.cp, logFile(t, "controller-1"), args...).metrics}
	waitLeaderIn(t, e.cp, monitoringNS)
	controllers = append(controllers, startController(t, e.cp, logFile(t, "controller-2"), args...).metrics)

	for name, addrs := range map[string]string{"web": webPool.String(), "routed": "203.0.113.64/29", "home-lab": "10.0.0.200-10.0.0.215"} {
		e.createObject(&v1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{v1alpha1.AddressRange(addrs)}}})
	}
	e.createObject(&v1alpha1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: v1alpha1.L2AdvertisementSpec{IPAddressPools: []v1alpha1.Name{"web"}}})
	e.createObject(&v1alpha1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "routed"},
		Spec: v1alpha1.BGPAdvertisementSpec{IPAddressPools: []v1alpha1.Name{"routed"}}})
	m.failIP, m.otherIP, m.movedIP = ownedBy(t, webPool, "node-c", all), ownedBy(t, webPool, "node-a", all), ownedBy(t, webPool, "node-b", all)
	m.service(t, "web-c", "web", m.failIP)
	m.service(t, "web-a", "web", m.otherIP)
	m.service(t, "web-b", "web", m.movedIP)
	m.service(t, "routed", "routed", netip.Addr{})
	for _, name := range []string{"gitea", "argocd", "harbor", "grafana"} {
		m.service(t, name, "home-lab", netip.Addr{})
	}
	e.waitEstablished("tor", 60*time.Second, all...)
	waitFor(t, "BFD Up with every node", 60*time.Second, func() bool { return bfdUp(t, m.bird, e.nodeIPs(false, all...)...) })
	for _, name := range []string{"web-c", "web-a", "web-b"} {
		m.waitReachable(t, name, v1alpha1.ReasonAnswered, 60*time.Second)
	}

	rules, fors, window := scaledRules(t)
	m.fors, m.window = fors, window
	var speakers []string
	for _, n := range e.Nodes {
		speakers = append(speakers, n.IPv4.Addr().String()+":7474")
	}
	m.prom = netlab.StartPrometheus(t, prometheusConfig(controllers, speakers), map[string]string{"portico.rules.yaml": rules})
	waitFor(t, "every target scraped", 30*time.Second, func() bool {
		down, err := m.prom.Targets(ctx)
		return err == nil && down == ""
	})
	m.watch = watchAlerts(t, m.prom)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus log:\n%s", m.prom.Log())
		}
	})
	return m
}

// ownedBy is the first address of pool whose owner among nodes is node.
func ownedBy(t *testing.T, pool netip.Prefix, node string, nodes []string) netip.Addr {
	for ip := pool.Addr(); pool.Contains(ip); ip = ip.Next() {
		if hashOwner(ip, nodes...) == node {
			return ip
		}
	}
	t.Fatalf("no address of %s for %s", pool, node)
	return netip.Addr{}
}

// service creates a LoadBalancer Service the controller gives an address from pool (ip, when
// valid, by request), and waits for it.
func (m *monitoredLab) service(t *testing.T, name, pool string, ip netip.Addr) {
	ann := map[string]string{v1alpha1.AnnotationAddressPool: pool}
	if ip.IsValid() {
		ann[v1alpha1.AnnotationLoadBalancerIPs] = ip.String()
	}
	m.e.createObject(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: ann},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}})
	waitFor(t, name+" gets an address", 60*time.Second, func() bool {
		var svc corev1.Service
		return m.e.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &svc) == nil &&
			len(svc.Status.LoadBalancer.Ingress) > 0
	})
}

// waitReachable waits for the Service's Reachable condition to have reason.
func (m *monitoredLab) waitReachable(t *testing.T, name, reason string, within time.Duration) {
	waitFor(t, name+" Reachable "+reason, within, func() bool {
		var svc corev1.Service
		if m.e.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &svc) != nil {
			return false
		}
		c := meta.FindStatusCondition(svc.Status.Conditions, v1alpha1.ConditionReachable)
		return c != nil && c.Reason == reason
	})
}

// waitLeaderIn waits until a controller replica holds the leader Lease in ns.
func waitLeaderIn(t *testing.T, cp *controlplane.ControlPlane, ns string) {
	waitFor(t, "a controller replica leads", 60*time.Second, func() bool {
		var l coordinationLease
		err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "portico-controller.portico.dev"}, &l.Lease)
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
	})
}

// prometheusConfig scrapes the controllers and the speakers as the ServiceMonitors do: each
// job named after the Service the ServiceMonitor selects; and Prometheus itself (self), whose
// series say when it evaluated its rules late.
func prometheusConfig(controllers, speakers []string) func(self string) string {
	quote := func(ts []string) string { return `["` + strings.Join(ts, `", "`) + `"]` }
	return func(self string) string {
		return fmt.Sprintf(`global:
  scrape_interval: %s
  scrape_timeout: %s
  evaluation_interval: %s
rule_files: [portico.rules.yaml]
scrape_configs:
  - job_name: portico-controller-metrics
    static_configs: [{targets: %s}]
  - job_name: portico-speaker-metrics
    static_configs: [{targets: %s}]
  - job_name: prometheus
    static_configs: [{targets: %s}]
`, model.Duration(scrapeInterval), model.Duration(scrapeTimeout), model.Duration(evalInterval), quote(controllers), quote(speakers), quote([]string{self}))
	}
}

var (
	rangeDuration = regexp.MustCompile(`\[(\d+[smhdwy])\]`)
	predictAhead  = regexp.MustCompile(`(predict_linear\([^)]*\],\s*)(\d+)\)`)
)

// scaledRules are the rules of config/monitoring's PrometheusRule as a rules file, every
// duration (each for:, each range, predict_linear's horizon) divided by durationScale; each
// alert's scaled for:; and the longest scaled range an alert counts over, but for
// predict_linear's lookback (whose alert needs a pool nearly empty as well).
func scaledRules(t *testing.T) (string, map[string]time.Duration, time.Duration) {
	root, err := controlplane.ModuleRoot()
	must(t, err)
	b, err := os.ReadFile(filepath.Join(root, "config", "monitoring", "prometheusrule.yaml"))
	must(t, err)
	var obj struct {
		Spec struct {
			Groups []struct {
				Name  string           `json:"name"`
				Rules []map[string]any `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	must(t, yaml.Unmarshal(b, &obj))
	scale := func(s string) string {
		d, err := model.ParseDuration(s)
		must(t, err)
		return model.Duration(time.Duration(d) / durationScale).String()
	}
	fors := map[string]time.Duration{}
	var window time.Duration
	for _, g := range obj.Spec.Groups {
		for _, r := range g.Rules {
			expr := rangeDuration.ReplaceAllStringFunc(r["expr"].(string), func(s string) string { return "[" + scale(s[1:len(s)-1]) + "]" })
			expr = predictAhead.ReplaceAllStringFunc(expr, func(s string) string {
				p := predictAhead.FindStringSubmatch(s)
				n, _ := strconv.Atoi(p[2])
				return p[1] + strconv.Itoa(n/durationScale) + ")"
			})
			r["expr"] = expr
			for _, d := range rangeDuration.FindAllStringSubmatch(predictAhead.ReplaceAllString(expr, ""), -1) {
				pd, _ := model.ParseDuration(d[1])
				window = max(window, time.Duration(pd))
			}
			var d time.Duration
			if f, ok := r["for"].(string); ok {
				r["for"] = scale(f)
				pd, _ := model.ParseDuration(r["for"].(string))
				d = time.Duration(pd)
			}
			fors[r["alert"].(string)] = d
		}
	}
	out, err := yaml.Marshal(obj.Spec)
	must(t, err)
	return string(out), fors, window
}

// alertWatch polls Prometheus's alerts until the test ends and keeps, for each alert, when it
// was first seen pending and firing since the last reset, and every alert that ever fired.
type alertWatch struct {
	mu     sync.Mutex
	now    map[string]string // alert → pending or firing; absent: inactive
	firing map[string]time.Time
	fired  map[string]bool
	ended  map[string]time.Time // when each alert last went inactive
}

func watchAlerts(t *testing.T, p *netlab.Prometheus) *alertWatch {
	w := &alertWatch{now: map[string]string{}, firing: map[string]time.Time{}, fired: map[string]bool{}, ended: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if alerts, err := p.Alerts(ctx); err == nil {
				w.update(t, alerts)
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *alertWatch) update(t *testing.T, alerts map[string]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at := time.Now()
	for name, state := range alerts {
		if w.now[name] != state {
			t.Logf("%s: %s is %s", at.Format("15:04:05.000"), name, state)
		}
		if state == "firing" {
			w.fired[name] = true
			if _, ok := w.firing[name]; !ok {
				w.firing[name] = at
			}
		}
	}
	for name := range w.now {
		if _, ok := alerts[name]; !ok {
			t.Logf("%s: %s resolved", at.Format("15:04:05.000"), name)
			delete(w.firing, name)
			w.ended[name] = at
		}
	}
	w.now = alerts
}

// state is name's current state ("" when inactive) and when it was first seen firing.
func (w *alertWatch) state(name string) (string, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now[name], w.firing[name]
}

// endedSince says whether name went inactive after from (a pending alert that stopped short
// of firing, or a firing one resolved).
func (w *alertWatch) endedSince(name string, from time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ended[name].After(from)
}

// everFired lists the alerts that have fired since the watch began.
func (w *alertWatch) everFired() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for name := range w.fired {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// resolvedWithin waits until none of the alerts is active, and returns how long after start
// that was.
func (m *monitoredLab) resolvedWithin(t *testing.T, start time.Time, within time.Duration, alerts ...string) time.Duration {
	waitFor(t, strings.Join(alerts, ", ")+" resolved", within, func() bool {
		for _, a := range alerts {
			if s, _ := m.watch.state(a); s != "" {
				return false
			}
		}
		return true
	})
	return time.Since(start)
}

// checkPanels runs every dashboard panel's queries against the lab's Prometheus: each must
// return at least one series with a number (no empty panel, no unknown metric).
func (m *monitoredLab) checkPanels(t *testing.T) {
	// A scrape missed under load leaves a series stale for a moment: poll each query a while.
	for _, q := range dashboardQueries(t) {
		var last string
		err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			v, _, err := m.prom.API.Query(ctx, q.expr, time.Now())
			vec, _ := v.(model.Vector)
			last = fmt.Sprintf("%v (error %v)", v, err)
			return err == nil && slices.ContainsFunc(vec, func(s *model.Sample) bool { return !math.IsNaN(float64(s.Value)) }), nil
		})
		if err != nil {
			t.Errorf("panel %q: %s returned no number for 30s: %s", q.panel, q.expr, last)
		}
	}
}

type panelQuery struct{ panel, expr string }

// dashboardQueries are the queries of config/monitoring/dashboard.json's panels.
func dashboardQueries(t *testing.T) []panelQuery {
	root, err := controlplane.ModuleRoot()
	must(t, err)
	b, err := os.ReadFile(filepath.Join(root, "config", "monitoring", "dashboard.json"))
	must(t, err)
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	must(t, json.Unmarshal(b, &dash))
	var out []panelQuery
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			out = append(out, panelQuery{p.Title, tg.Expr})
		}
	}
	if len(out) == 0 {
		t.Fatal("the dashboard has no query")
	}
	return out
}

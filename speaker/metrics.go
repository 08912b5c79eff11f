package speaker

import (
	"maps"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/internal/events"
	"github.com/portico-lb/portico/speaker/plan"
)

// Metrics are the speaker's Prometheus series (portico_ prefix).
type Metrics struct {
	requests     *prometheus.CounterVec
	replies      *prometheus.CounterVec
	gratuitous   *prometheus.CounterVec
	periodic     *prometheus.CounterVec
	ownerChanges *prometheus.CounterVec
	failover     prometheus.Histogram
	announced    prometheus.Gauge
	membersLost  prometheus.Counter
	// membersRefused, keys and keyChanges are the gossip group's (gossip.go).
	membersRefused prometheus.Counter
	keys           prometheus.Gauge
	keyChanges     prometheus.Counter
	reconcile      prometheus.Histogram
	probes         *prometheus.CounterVec // self-check outcomes (selfcheck.go)
	bgpStop        *prometheus.GaugeVec   // what a stop would do with the BGP routes (shutdown.go)
	events         events.Metrics
	// takeovers and takeoversHeld are the hand-off's (takeovers.go).
	takeovers     prometheus.Counter
	takeoversHeld prometheus.Gauge
	// flowShares, flowsShared and flowsListed are flow sharing's (flowshare.go).
	flowShares  *prometheus.CounterVec
	flowsShared prometheus.Counter
	flowsListed prometheus.Counter
	// conditions are the Speaker's conditions as last written, one series each (reporter.go);
	// conditionLabels each one's current labels.
	conditions      *prometheus.GaugeVec
	conditionLabels map[string]prometheus.Labels
}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_l2_requests_total",
			Help: "ARP requests and neighbour solicitations received for addresses this node owns."}, []string{"protocol"}),
		replies: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_l2_replies_total",
			Help: "ARP replies and neighbour advertisements sent in answer."}, []string{"protocol"}),
		gratuitous: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_l2_gratuitous_total",
			Help: "Gratuitous ARP and unsolicited neighbour advertisements sent on takeover."}, []string{"protocol"}),
		periodic: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_l2_gratuitous_periodic_total",
			Help: "Gratuitous ARP and unsolicited neighbour advertisements sent again every L2Advertisement gratuitousInterval."}, []string{"protocol"}),
		ownerChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_l2_owner_changes_total",
			Help: "Addresses this node started (gained) or stopped (lost) answering for, by cause: member-lost, member-joined, config."},
			[]string{"cause", "direction"}),
		failover: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "portico_l2_failover_seconds",
			Help:    "Time from a member's loss being detected to this node's first gratuitous announcement of the addresses it took over.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}}),
		announced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "portico_l2_announced_addresses",
			Help: "Addresses this node answers for."}),
		membersLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_memberlist_members_lost_total",
			Help: "Members this node saw leave or declared dead; when nobody really died these are false suspicions."}),
		membersRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_memberlist_members_refused_total",
			Help: "Gossip messages refused because the member claimed a node name from an address that is not one of that Node's InternalIPs."}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{Name: "portico_memberlist_keys",
			Help: "Gossip encryption keys in use (the primary and the accepted ones), as last read from the memberlist Secret."}),
		keyChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_memberlist_key_changes_total",
			Help: "Times this speaker applied changed keys from the memberlist Secret."}),
	}
	m.reconcile = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "portico_speaker_reconcile_seconds",
		Help:    "Time one reaction to a change takes: reading the cache, planning, and applying the plan to the L2 responders and the BGP sessions.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}})
	m.bgpStop = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "portico_bgp_stop_keeps_routes",
		Help: "1 when a stop of this speaker now is a restart whose BGP routes the routers keep (graceful restart), 0 when it withdraws them at once; reason says why (restart, cordoned, not-ready, excluded, node-deleting, node-leaving, node-gone)."},
		[]string{"reason"})
	m.takeovers = prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_l2_handoffs_total",
		Help: "Addresses this node took over while their previous owner's node stayed, whose flows it hands off to that node."})
	m.takeoversHeld = prometheus.NewGauge(prometheus.GaugeOpts{Name: "portico_l2_handoff_entries",
		Help: "Addresses whose flows this node hands off to their previous owner now."})
	m.flowShares = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_bgp_flow_shares_total",
		Help: "Times this node asked the members to share their flows around a change of its place in its addresses' ECMP sets (a drain, an uncordon: before it, right after it and once more a moment later), by result: complete (every ack came) or incomplete (it went ahead after waiting)."},
		[]string{"result"})
	m.flowsShared = prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_bgp_flows_shared_total",
		Help: "Flows this node held and sent to the other members when asked to share them."})
	m.flowsListed = prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_bgp_flows_listed_total",
		Help: "Flows other members hold that this node listed, to hand them off to their holder if they reach it."})
	m.conditions = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "portico_speaker_condition",
		Help: "1 for each condition of this node's Speaker (Ready, DataPath, HandoffMarks, StrictARP), labelled with its status and reason as last written; one series per condition."},
		[]string{"condition", "status", "reason"})
	m.conditionLabels = map[string]prometheus.Labels{}
	reg.MustRegister(m.requests, m.replies, m.gratuitous, m.periodic, m.ownerChanges, m.failover, m.announced, m.membersLost, m.reconcile,
		m.membersRefused, m.keys, m.keyChanges, m.takeovers, m.takeoversHeld, m.bgpStop, m.flowShares, m.flowsShared, m.flowsListed,
		m.conditions)
	m.probes = newProbeCounter(reg)
	m.events = events.NewMetrics(reg)
	return m
}

// RegisterGuardDrops registers the forwarding guard's counter, read at each scrape.
func RegisterGuardDrops(reg prometheus.Registerer, dropped func() (uint64, error)) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "portico_speaker_guard_dropped_packets_total",
		Help: "Packets to addresses this node announces that nothing on the node translated (no service proxy rule for them yet), dropped instead of routed back out."},
		func() float64 { n, _ := dropped(); return float64(n) }))
}

// RegisterHeartbeatRefusals registers the gossip group's refused heartbeats, by reason, read
// at each scrape.
func RegisterHeartbeatRefusals(reg prometheus.Registerer, refused func() map[string]uint64) {
	for reason := range refused() {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "portico_memberlist_heartbeats_refused_total",
			Help:        "Direct heartbeats this node refused, by reason: unreadable (no key opens it), unknown-source (from no member's address), other-life (from a life the sender no longer gossips), receiver-restarted (recorded before this speaker started), replayed (numbered at or below the last one taken), wrong-path, out-of-order.",
			ConstLabels: prometheus.Labels{"reason": reason}}, func() float64 { return float64(refused()[reason]) }))
	}
}

// bgpStopping records what a stop does (or would do now) with the BGP routes.
func (m *Metrics) bgpStopping(stop plan.Stop) {
	keep := 0.0
	if stop.Keep {
		keep = 1
	}
	m.bgpStop.Reset()
	m.bgpStop.WithLabelValues(stop.Reason).Set(keep)
}

// speakerConditions exports conds, the Speaker's conditions, one series each. A condition
// whose status or reason changed has its series replaced, and one no longer there removed; the
// others are left as they are, so that no scrape finds a condition missing that was not
// (which would end a pending alert). Called from the reporter's one goroutine.
func (m *Metrics) speakerConditions(conds []metav1.Condition) {
	seen := map[string]bool{}
	for _, c := range conds {
		seen[c.Type] = true
		labels := prometheus.Labels{"condition": c.Type, "status": string(c.Status), "reason": c.Reason}
		if old, ok := m.conditionLabels[c.Type]; ok && !maps.Equal(old, labels) {
			m.conditions.Delete(old)
		}
		m.conditions.With(labels).Set(1)
		m.conditionLabels[c.Type] = labels
	}
	for condition, old := range m.conditionLabels {
		if !seen[condition] {
			m.conditions.Delete(old)
			delete(m.conditionLabels, condition)
		}
	}
}

// RegisterHandoffCounts registers the hand-off's kernel counters, read at each scrape: the
// flows picked up (their first packet was not a SYN) and every packet handed off, over L2
// (l2) and by flow sharing (flows), and the packets flow sharing held back (heldBack).
func RegisterHandoffCounts(reg prometheus.Registerer, l2, flows func() (flows, packets uint64, err error), heldBack func() (uint64, error)) {
	for _, c := range []struct {
		flows, packets prometheus.CounterOpts
		counts         func() (uint64, uint64, error)
	}{
		{prometheus.CounterOpts{Name: "portico_l2_handoff_flows_total",
			Help: "Flows to addresses this node took over whose first packet here was not a SYN (a connection opened through the previous owner), handed off to that node."},
			prometheus.CounterOpts{Name: "portico_l2_handoff_packets_total",
				Help: "Packets of handed-off flows routed on to the address's previous owner."}, l2},
		{prometheus.CounterOpts{Name: "portico_bgp_flow_handoff_flows_total",
			Help: "Flows another node shared (it holds their state) whose first packet here was not a SYN (the router moved them here), handed off to that node."},
			prometheus.CounterOpts{Name: "portico_bgp_flow_handoff_packets_total",
				Help: "Packets of those flows routed on to the node that holds them."}, flows},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(c.flows, func() float64 { n, _, _ := c.counts(); return float64(n) }))
		reg.MustRegister(prometheus.NewCounterFunc(c.packets, func() float64 { _, n, _ := c.counts(); return float64(n) }))
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "portico_bgp_flow_holdback_packets_total",
		Help: "Packets of flows this node neither held nor had listed, dropped while a flow-sharing round was on (their clients retransmit until the flow is listed)."},
		func() float64 { n, _ := heldBack(); return float64(n) }))
}

// Request, Reply, Gratuitous and Periodic make Metrics an l2.Counters.
func (m *Metrics) Request(proto string)    { m.requests.WithLabelValues(proto).Inc() }
func (m *Metrics) Reply(proto string)      { m.replies.WithLabelValues(proto).Inc() }
func (m *Metrics) Gratuitous(proto string) { m.gratuitous.WithLabelValues(proto).Inc() }
func (m *Metrics) Periodic(proto string)   { m.periodic.WithLabelValues(proto).Inc() }

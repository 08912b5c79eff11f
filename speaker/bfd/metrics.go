package bfd

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	up         *prometheus.GaugeVec
	changes    *prometheus.CounterVec
	sent       *prometheus.CounterVec
	received   *prometheus.CounterVec
	sendErrors *prometheus.CounterVec
	dropped    *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "portico_bfd_session_up",
			Help: "1 while this node's BFD session with the BGP peer is Up, else 0."}, []string{"peer"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_bfd_state_changes_total",
			Help: "BFD session state changes, by the state entered."}, []string{"peer", "state"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_bfd_packets_sent_total",
			Help: "BFD control packets sent to the peer."}, []string{"peer"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_bfd_packets_received_total",
			Help: "Well-formed BFD control packets received from the peer's address with TTL 255."}, []string{"peer"}),
		sendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_bfd_send_errors_total",
			Help: "BFD control packets the kernel refused to send."}, []string{"peer"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_bfd_packets_dropped_total",
			Help: "Received BFD packets discarded, by reason: ttl, malformed, unknown-peer, discriminator, authentication, admin-down, overrun."}, []string{"reason"}),
	}
}

func (m *metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.up, m.changes, m.sent, m.received, m.sendErrors, m.dropped}
}

// Describe and Collect make Manager a Prometheus collector of its sessions' series.
func (m *Manager) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.metrics.all() {
		c.Describe(ch)
	}
}

func (m *Manager) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.metrics.all() {
		c.Collect(ch)
	}
}

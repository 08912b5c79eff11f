package bgp

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	sessionUpDesc = prometheus.NewDesc("portico_bgp_session_up",
		"1 when this node's BGP session with the peer is Established, else 0.", []string{"peer"}, nil)
	prefixesDesc = prometheus.NewDesc("portico_bgp_prefixes_advertised",
		"Prefixes this node advertises to the peer.", []string{"peer"}, nil)
	updatesSentDesc = prometheus.NewDesc("portico_bgp_updates_sent_total",
		"BGP UPDATE messages sent to the peer since its session (re)started.", []string{"peer"}, nil)
	prefixesReceivedDesc = prometheus.NewDesc("portico_bgp_prefixes_received",
		"Routes the peer sent, kept in the session's Adj-RIB-In.", []string{"peer"}, nil)
	prefixesAcceptedDesc = prometheus.NewDesc("portico_bgp_prefixes_accepted",
		"Routes from the peer in this node's RIB after the import policy, which rejects them all (so 0).", []string{"peer"}, nil)
	prefixLimitCeasesDesc = prometheus.NewDesc("portico_bgp_prefix_limit_ceases_total",
		"Times this node ceased its session with the peer because the router sent more routes than the BGPPeer's maxPrefixes.", []string{"peer"}, nil)
)

// Describe and Collect make Sessions a Prometheus collector: the series are read from the
// running sessions at scrape time, so a removed peer's series disappear with it.
func (s *Sessions) Describe(ch chan<- *prometheus.Desc) {
	ch <- sessionUpDesc
	ch <- prefixesDesc
	ch <- updatesSentDesc
	ch <- prefixesReceivedDesc
	ch <- prefixesAcceptedDesc
	ch <- prefixLimitCeasesDesc
}

func (s *Sessions) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	counters, ceases := s.Counters(ctx), s.limitCeases()
	for name, st := range s.States() {
		up := 0.0
		if st.Established() {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(sessionUpDesc, prometheus.GaugeValue, up, name)
		ch <- prometheus.MustNewConstMetric(prefixesDesc, prometheus.GaugeValue, float64(st.Routes), name)
		ch <- prometheus.MustNewConstMetric(updatesSentDesc, prometheus.CounterValue, float64(counters[name].UpdatesSent), name)
		ch <- prometheus.MustNewConstMetric(prefixesReceivedDesc, prometheus.GaugeValue, float64(counters[name].PrefixesReceived), name)
		ch <- prometheus.MustNewConstMetric(prefixesAcceptedDesc, prometheus.GaugeValue, float64(counters[name].PrefixesAccepted), name)
		ch <- prometheus.MustNewConstMetric(prefixLimitCeasesDesc, prometheus.CounterValue, float64(ceases[name]), name)
	}
}

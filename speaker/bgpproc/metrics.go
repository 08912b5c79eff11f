package bgpproc

import (
	"bytes"
	"errors"
	"io"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Metrics are the speaker's series about its BGP process.
type Metrics struct {
	up       prometheus.Gauge
	restarts *prometheus.CounterVec
}

// NewMetrics registers the series in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "portico_bgp_process_up",
			Help: "1 while the BGP process (GoBGP and BFD, a child of the speaker) runs and has its plan, else 0."}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_bgp_process_restarts_total",
			Help: "Times the BGP process ended and was started again, by why: exited (a crash), stuck (an unanswered ping), memory (above its limit), start (could not be started)."},
			[]string{"reason"}),
	}
	// Every reason exists from the start, at 0, so a rule's increase() sees the first restart.
	for _, reason := range []string{"exited", "stuck", "memory", "start"} {
		m.restarts.WithLabelValues(reason)
	}
	reg.MustRegister(m.up, m.restarts)
	return m
}

// Gather makes Supervisor a prometheus.Gatherer for the BGP process's own series (sessions,
// BFD, its memory): asked at scrape time, so a scrape while it restarts lacks them.
func (s *Supervisor) Gather() ([]*dto.MetricFamily, error) {
	p := s.running.Load()
	if p == nil {
		return nil, nil
	}
	a, err := p.call(request{Metrics: true}, s.pings().wait/2)
	if err != nil {
		return nil, nil // the process is going; its series go with it
	}
	return decodeMetrics(a.Metrics)
}

func decodeMetrics(b []byte) ([]*dto.MetricFamily, error) {
	dec := expfmt.NewDecoder(bytes.NewReader(b), expfmt.NewFormat(expfmt.TypeProtoDelim))
	var out []*dto.MetricFamily
	for {
		f := &dto.MetricFamily{}
		err := dec.Decode(f)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
}

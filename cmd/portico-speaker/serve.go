package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// newRegistry holds the speaker's series beside the Go runtime's and the process's.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	// The same series as a controller-runtime manager registers (and the controller serves).
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsAll)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

func metricsMux(reg prometheus.Gatherer) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// probesMux serves /healthz and /readyz, each check also at its own path (/readyz/<name>), as
// a controller-runtime manager does.
func probesMux(alive, ready map[string]healthz.Checker) *http.ServeMux {
	mux := http.NewServeMux()
	for path, checks := range map[string]map[string]healthz.Checker{"/healthz": alive, "/readyz": ready} {
		h := http.StripPrefix(path, &healthz.Handler{Checks: checks})
		mux.Handle(path, h)
		mux.Handle(path+"/", h)
	}
	return mux
}

func pprofMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// onNode gives a listen address with a port alone (":7474") this node's address: the speaker
// runs on the host's network, where a wildcard would expose its endpoints on every interface
// the node has (a public one, a VPN's). An address with a host, a wildcard included
// ("0.0.0.0:7474", "[::]:7474"), is kept as given; "0" and "" (nothing served) too.
func onNode(addr string, node netip.Addr) (string, error) {
	if addr == "0" || addr == "" {
		return addr, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if host != "" {
		return addr, nil
	}
	return net.JoinHostPort(node.String(), port), nil
}

// serve listens on addr now (so a taken port fails the start) and serves h until ctx ends;
// addr "0" or "" serves nothing.
func serve(ctx context.Context, log logr.Logger, name, addr string, h http.Handler) error {
	if addr == "0" || addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "serving", "server", name, "address", addr)
		}
	}()
	log.Info("serving", "server", name, "address", l.Addr().String())
	return nil
}

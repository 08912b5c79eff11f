package netlab

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Router is a BGP daemon (bird2 or FRR) running in a lab namespace as a child of the test.
type Router struct {
	t    TB
	NS   string
	kind string // "bird" or "frr"
	dir  string
	name string // FRR pathspace
	conf string
	cmds []*exec.Cmd
	done []chan struct{}
}

// StartBird runs bird2 in namespace ns with config (written to a file in the test's temp
// directory), with its own control socket, and waits until it answers birdc. It is stopped
// (SIGTERM, so it removes its kernel routes) when the test ends.
func StartBird(t TB, ns, config string) *Router {
	t.Helper()
	r := &Router{t: t, NS: ns, kind: "bird", dir: t.TempDir(), conf: config}
	if err := os.WriteFile(filepath.Join(r.dir, "bird.conf"), []byte(config), 0o644); err != nil {
		t.Fatalf("%v", err)
	}
	if out, err := exec.Command("bird", "-p", "-c", filepath.Join(r.dir, "bird.conf")).CombinedOutput(); err != nil {
		t.Fatalf("bird config does not parse: %v\n%s\n%s", err, out, config)
	}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// Start (re)starts the daemon with its configuration and waits until it answers.
func (r *Router) Start() {
	r.t.Helper()
	switch r.kind {
	case "bird":
		log, err := os.OpenFile(filepath.Join(r.dir, "bird.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			r.t.Fatalf("%v", err)
		}
		r.spawn(log, "ip", "netns", "exec", r.NS, "bird", "-f", "-c", filepath.Join(r.dir, "bird.conf"),
			"-s", r.socket(), "-P", filepath.Join(r.dir, "bird.pid"))
		WaitFor(r.t, "bird answers in "+r.NS, 10*time.Second, func() bool {
			_, err := r.Birdc("show", "status")
			return err == nil
		})
	case "frr":
		r.startFRR()
	}
}

func (r *Router) spawn(log *os.File, name string, args ...string) {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("%v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	r.cmds, r.done = append(r.cmds, cmd), append(r.done, done)
}

// Stop ends the daemon with SIGTERM (bird and zebra then remove the routes they installed)
// and waits for it to exit.
func (r *Router) Stop() {
	for i, cmd := range r.cmds {
		_ = cmd.Process.Signal(sigterm)
		select {
		case <-r.done[i]:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-r.done[i]
		}
	}
	r.cmds, r.done = nil, nil
}

// Signal sends sig to the daemon's processes: SIGSTOP freezes the router without closing a
// session, as a hung router would; SIGCONT thaws it.
func (r *Router) Signal(sig os.Signal) {
	for _, cmd := range r.cmds {
		_ = cmd.Process.Signal(sig)
	}
}

func (r *Router) socket() string { return filepath.Join(r.dir, "bird.ctl") }

// Birdc runs a birdc command against this bird and returns its output.
func (r *Router) Birdc(args ...string) (string, error) {
	out, err := exec.Command("birdc", append([]string{"-s", r.socket()}, args...)...).CombinedOutput()
	return string(out), err
}

// Log returns the daemon's log.
func (r *Router) Log() string {
	var b strings.Builder
	for _, f := range []string{"bird.log", "zebra.log", "bgpd.log"} {
		if data, err := os.ReadFile(filepath.Join(r.dir, f)); err == nil {
			fmt.Fprintf(&b, "--- %s\n%s", f, data)
		}
	}
	return b.String()
}

// Gateways returns the next hops of ns's kernel route for exactly prefix, sorted (several
// for an ECMP route), or none when there is no such route. An ip failure (a missing
// namespace, unreadable output) is an error, never "no route": a check for a route's absence
// must not pass because the check itself could not look.
func Gateways(ns string, prefix netip.Prefix) ([]netip.Addr, error) {
	weights, err := NextHopWeights(ns, prefix)
	return slices.SortedFunc(maps.Keys(weights), netip.Addr.Compare), err
}

// NextHopWeights returns the next hops of ns's kernel route for exactly prefix with their
// weights (1 for a single-path route, as the kernel counts it), empty when there is no such
// route; errors as Gateways.
func NextHopWeights(ns string, prefix netip.Prefix) (map[netip.Addr]int, error) {
	fam := "-4"
	if prefix.Addr().Is6() {
		fam = "-6"
	}
	cmd := exec.Command("ip", "-n", ns, fam, "-j", "route", "show", "exact", prefix.String())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("ip -n %s route show exact %s: %w: %s", ns, prefix, err, strings.TrimSpace(stderr.String()))
	}
	var routes []struct {
		Gateway  string `json:"gateway"`
		Nexthops []struct {
			Gateway string `json:"gateway"`
			Weight  int    `json:"weight"` // absent (0) means 1
		} `json:"nexthops"`
	}
	if err := json.Unmarshal(out, &routes); err != nil {
		return nil, fmt.Errorf("reading ip's routes in %s: %w: %q", ns, err, out)
	}
	weights := map[netip.Addr]int{}
	add := func(s string, w int) {
		if a, err := netip.ParseAddr(s); err == nil {
			weights[a] = max(w, 1)
		}
	}
	for _, rt := range routes {
		add(rt.Gateway, 1)
		for _, nh := range rt.Nexthops {
			add(nh.Gateway, nh.Weight)
		}
	}
	return weights, nil
}

package l2

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/go-logr/logr"
)

// Announcer keeps one Responder per interface in use and tells each which addresses it owns.
type Announcer struct {
	log      logr.Logger
	counters Counters
	// mu guards responders: the loop sets and silences them, a gratuitousInterval's timer
	// announces through them.
	mu         sync.Mutex
	responders map[string]*Responder
	// warnings per interface (IPv6 unavailable), reported again on every Set.
	warnings map[string]error
	verdicts []Verdict // the links seen by the latest Set, and whether each answers by default
}

// NewAnnouncer returns an Announcer that answers nowhere until Set is called.
func NewAnnouncer(log logr.Logger, counters Counters) *Announcer {
	return &Announcer{log: log, counters: counters, responders: map[string]*Responder{}, warnings: map[string]error{}}
}

// Want maps each owned address to the interfaces it is answered on, by name or pattern; nil
// means the node's suitable interfaces (Decide), those whose subnet holds the address first
// (ForAddress).
type Want map[netip.Addr][]string

// Set makes the node answer exactly for want. It returns, per address, the interfaces it is
// really answered on, and the problems found (an interface that does not exist, a socket that
// could not be opened); a problem with one interface never stops the others.
func (a *Announcer) Set(want Want) (answered map[netip.Addr][]string, problems []error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	links, err := ReadLinks()
	if err != nil {
		problems = append(problems, err)
	}
	a.verdicts = Decide(links)
	perIface, errs := a.interfacesOf(want, links)
	problems = append(problems, errs...)
	answered = map[netip.Addr][]string{}
	for name, ips := range perIface {
		r, err := a.responder(name)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if w := a.warnings[name]; w != nil && slices.ContainsFunc(ips, netip.Addr.Is6) {
			problems = append(problems, w)
		}
		if err := r.Set(ips); err != nil {
			problems = append(problems, fmt.Errorf("announcing on %s: %w", name, err))
		}
		for _, ip := range ips {
			if ip.Is6() && r.ndp == nil {
				continue
			}
			answered[ip] = append(answered[ip], name)
		}
	}
	for name, r := range a.responders {
		if _, used := perIface[name]; !used {
			if err := r.Close(); err != nil {
				a.log.Info("closing responder", "interface", name, "error", err.Error())
			}
			delete(a.responders, name)
			delete(a.warnings, name)
		}
	}
	for ip := range answered {
		sort.Strings(answered[ip])
	}
	return answered, problems
}

// interfacesOf resolves want into the addresses to answer on each interface: an address's
// advertisement's names and patterns (Expand, once per list), or the node's suitable interfaces
// whose subnet holds it (ForAddress).
func (a *Announcer) interfacesOf(want Want, links []Link) (map[string][]netip.Addr, []error) {
	var problems []error
	expanded := map[string][]string{} // an advertisement's interfaces, names and patterns, resolved
	perIface := map[string][]netip.Addr{}
	for ip, entries := range want {
		var names []string
		if len(entries) == 0 {
			names = ForAddress(ip, links, a.verdicts)
		} else {
			key := strings.Join(entries, ",")
			var ok bool
			if names, ok = expanded[key]; !ok {
				var errs []error
				names, errs = Expand(entries, links)
				problems = append(problems, errs...)
				expanded[key] = names
			}
		}
		for _, name := range names {
			perIface[name] = append(perIface[name], ip)
		}
	}
	return perIface, problems
}

func (a *Announcer) responder(name string) (*Responder, error) {
	if r, ok := a.responders[name]; ok {
		return r, nil
	}
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", name, err)
	}
	r, warning, err := Open(ifi, a.log, a.counters)
	if err != nil {
		return nil, err
	}
	a.responders[name] = r
	a.warnings[name] = warning
	return r, nil
}

// Reannounce announces every owned address again on every interface, as Set announces new
// ones: a client may hold the MAC of a node that answered while this one was cut off.
func (a *Announcer) Reannounce() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.responders {
		r.Reannounce()
	}
}

// AnnounceOnce announces each of ips once on every interface it is answered on (an
// L2Advertisement's gratuitousInterval); it returns the problems met, one per interface.
func (a *Announcer) AnnounceOnce(ips []netip.Addr) []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var problems []error
	for name, r := range a.responders {
		if err := r.AnnounceOnce(ips); err != nil {
			problems = append(problems, fmt.Errorf("announcing again on %s: %w", name, err))
		}
	}
	return problems
}

// Silence stops answering everywhere at once, keeping the sockets until Close (see
// Responder.Silence).
func (a *Announcer) Silence() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.responders {
		r.Silence()
	}
}

// Close stops answering everywhere at once.
func (a *Announcer) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for name, r := range a.responders {
		errs = append(errs, r.Close())
		delete(a.responders, name)
	}
	return errors.Join(errs...)
}

// Interfaces are the node's links as the latest Set saw them, and whether each answers when an
// advertisement names no interface (and why not).
func (a *Announcer) Interfaces() []Verdict { return a.verdicts }

// SolicitNeighbour asks for the link-layer address of the next hop towards ip in the kernel's
// place (the package function of that name says why).
func (a *Announcer) SolicitNeighbour(ip netip.Addr) (asked bool, err error) {
	return SolicitNeighbour(ip)
}

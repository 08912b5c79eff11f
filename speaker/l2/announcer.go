package l2

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"

	"github.com/go-logr/logr"
)

// Announcer keeps one Responder per interface in use and tells each which addresses it owns.
type Announcer struct {
	log        logr.Logger
	counters   Counters
	responders map[string]*Responder
	// warnings per interface (IPv6 unavailable), reported again on every Set.
	warnings map[string]error
}

// NewAnnouncer returns an Announcer that answers nowhere until Set is called.
func NewAnnouncer(log logr.Logger, counters Counters) *Announcer {
	return &Announcer{log: log, counters: counters, responders: map[string]*Responder{}, warnings: map[string]error{}}
}

// Want maps each owned address to the interfaces it is answered on; nil interfaces means every
// suitable interface of the node.
type Want map[netip.Addr][]string

// Set makes the node answer exactly for want. It returns, per address, the interfaces it is
// really answered on, and the problems found (an interface that does not exist, a socket that
// could not be opened); a problem with one interface never stops the others.
func (a *Announcer) Set(want Want) (answered map[netip.Addr][]string, problems []error) {
	var all []string
	needAll := false
	for _, ifs := range want {
		needAll = needAll || len(ifs) == 0
	}
	if needAll {
		ifs, err := Suitable()
		if err != nil {
			problems = append(problems, err)
		}
		all = ifs
	}
	perIface := map[string][]netip.Addr{}
	answered = map[netip.Addr][]string{}
	for ip, ifs := range want {
		if len(ifs) == 0 {
			ifs = all
		}
		for _, name := range ifs {
			perIface[name] = append(perIface[name], ip)
		}
	}
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

// Close stops answering everywhere at once.
func (a *Announcer) Close() error {
	var errs []error
	for name, r := range a.responders {
		errs = append(errs, r.Close())
		delete(a.responders, name)
	}
	return errors.Join(errs...)
}

// Suitable lists the interfaces that can carry announcements when an advertisement names none:
// up, broadcast-capable, with an Ethernet address, not loopback.
func Suitable() ([]string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	var names []string
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagBroadcast == 0 || ifi.Flags&net.FlagLoopback != 0 || len(ifi.HardwareAddr) != 6 {
			continue
		}
		names = append(names, ifi.Name)
	}
	return names, nil
}

package l2

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
	"golang.org/x/net/ipv6"
)

// Counters receive what the responder does, by protocol ("arp" or "ndp"). Requests counts
// requests for owned addresses; Replies the answers sent; Gratuitous the unsolicited
// announcements of a takeover; Periodic those sent again every gratuitousInterval.
type Counters interface {
	Request(proto string)
	Reply(proto string)
	Gratuitous(proto string)
	Periodic(proto string)
}

type noCounters struct{}

func (noCounters) Request(string)    {}
func (noCounters) Reply(string)      {}
func (noCounters) Gratuitous(string) {}
func (noCounters) Periodic(string)   {}

// Repeats of a takeover announcement after the first one, for a frame that gets lost. The first
// goes out before Set returns; these follow in the background.
var announceRepeats = []time.Duration{100 * time.Millisecond, 400 * time.Millisecond, time.Second}

// Responder answers for the owned addresses on one interface.
type Responder struct {
	ifi      *net.Interface
	log      logr.Logger
	counters Counters
	arp      *packet.Conn
	ndp      *ndp.Conn // nil when the interface has no usable IPv6 link-local address

	owned atomic.Pointer[map[netip.Addr]struct{}] // read on every packet, replaced by Set

	mu     sync.Mutex // serialises Set, Silence and Close
	silent bool       // Silence or Close was called: nothing is owned or announced any more
	closed bool
	stop   chan struct{} // closed by Close: ends repeats and read loops
	wg     sync.WaitGroup
}

// Open opens the sockets for ifi (CAP_NET_RAW needed). IPv6 is optional: without a link-local
// address the responder answers ARP only and says so in the returned warning.
func Open(ifi *net.Interface, log logr.Logger, counters Counters) (r *Responder, ipv6Warning error, err error) {
	if len(ifi.HardwareAddr) != 6 {
		return nil, nil, fmt.Errorf("interface %s has no Ethernet address", ifi.Name)
	}
	if counters == nil {
		counters = noCounters{}
	}
	ac, err := packet.Listen(ifi, packet.Raw, int(ethernet.EtherTypeARP), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("listening for ARP on %s: %w", ifi.Name, err)
	}
	r = &Responder{ifi: ifi, log: log.WithValues("interface", ifi.Name), counters: counters, arp: ac, stop: make(chan struct{})}
	r.owned.Store(&map[netip.Addr]struct{}{})
	if nc, _, err := ndp.Listen(ifi, ndp.LinkLocal); err != nil {
		ipv6Warning = fmt.Errorf("IPv6 not answered on %s: %w", ifi.Name, err)
	} else {
		var f ipv6.ICMPFilter
		f.SetAll(true)
		f.Accept(ipv6.ICMPTypeNeighborSolicitation)
		err = errors.Join(nc.SetICMPFilter(&f), nc.SetControlMessage(ipv6.FlagHopLimit, true))
		if err != nil {
			nc.Close()
			ac.Close()
			return nil, nil, fmt.Errorf("setting up NDP on %s: %w", ifi.Name, err)
		}
		r.ndp = nc
	}
	r.wg.Add(1)
	go r.serveARP()
	if r.ndp != nil {
		r.wg.Add(1)
		go r.serveNDP()
	}
	return r, ipv6Warning, nil
}

// Interface is the interface the responder answers on.
func (r *Responder) Interface() string { return r.ifi.Name }

func (r *Responder) owns(ip netip.Addr) bool {
	_, ok := (*r.owned.Load())[ip]
	return ok
}

// Set replaces the owned addresses. Addresses that are new are announced at once (the first
// frames are sent before Set returns) and again a few times after. IPv6 addresses need their
// solicited-node multicast group joined, or their solicitations never reach the socket.
func (r *Responder) Set(addrs []netip.Addr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.silent {
		return errors.New("responder closed")
	}
	old := *r.owned.Load()
	next := make(map[netip.Addr]struct{}, len(addrs))
	for _, a := range addrs {
		next[a.Unmap().WithZone("")] = struct{}{}
	}
	var errs []error
	var added []netip.Addr
	for a := range next {
		if _, had := old[a]; had {
			continue
		}
		added = append(added, a)
		if a.Is6() && r.ndp != nil {
			errs = append(errs, r.group(a, true))
		}
	}
	r.owned.Store(&next)
	for a := range old {
		if _, keep := next[a]; !keep && a.Is6() && r.ndp != nil {
			errs = append(errs, r.group(a, false))
		}
	}
	for _, a := range added {
		errs = append(errs, r.announce(a, r.counters.Gratuitous))
	}
	if len(added) > 0 {
		r.wg.Add(1)
		go r.repeat(added)
	}
	return errors.Join(errs...)
}

// Reannounce announces every owned address again, at once and a few times after, as Set
// announces new ones.
func (r *Responder) Reannounce() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.silent {
		return
	}
	var ips []netip.Addr
	for ip := range *r.owned.Load() {
		ips = append(ips, ip)
		if err := r.announce(ip, r.counters.Gratuitous); err != nil {
			r.log.V(1).Info("announcing again failed", "ip", ip, "error", err.Error())
		}
	}
	if len(ips) > 0 {
		r.wg.Add(1)
		go r.repeat(ips)
	}
}

// AnnounceOnce announces those of ips the responder owns once each, as an L2Advertisement's
// gratuitousInterval asks (counted as Periodic).
func (r *Responder) AnnounceOnce(ips []netip.Addr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.silent {
		return nil
	}
	var errs []error
	for _, ip := range ips {
		errs = append(errs, r.announce(ip, r.counters.Periodic))
	}
	return errors.Join(errs...)
}

// group joins or leaves ip's solicited-node group. Two owned addresses can share a group (same
// last 24 bits); the kernel counts joins per socket, so joins and leaves stay balanced.
func (r *Responder) group(ip netip.Addr, join bool) error {
	g, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		return err
	}
	if join {
		return r.ndp.JoinGroup(g)
	}
	return r.ndp.LeaveGroup(g)
}

// announce sends the gratuitous frames for ip if it is still owned, counting each with count.
func (r *Responder) announce(ip netip.Addr, count func(proto string)) error {
	if !r.owns(ip) {
		return nil
	}
	if ip.Is4() {
		var errs []error
		for _, f := range gratuitousARP(r.ifi.HardwareAddr, ip) {
			if _, err := r.arp.WriteTo(f, &packet.Addr{HardwareAddr: ethernet.Broadcast}); err != nil {
				errs = append(errs, err)
				continue
			}
			count("arp")
		}
		return errors.Join(errs...)
	}
	if r.ndp == nil {
		return nil
	}
	if err := r.ndp.WriteTo(unsolicitedNA(r.ifi.HardwareAddr, ip), nil, allNodes); err != nil {
		return err
	}
	count("ndp")
	return nil
}

func (r *Responder) repeat(ips []netip.Addr) {
	defer r.wg.Done()
	start := time.Now()
	for _, at := range announceRepeats {
		t := time.NewTimer(time.Until(start.Add(at)))
		select {
		case <-r.stop:
			t.Stop()
			return
		case <-t.C:
		}
		for _, ip := range ips {
			if err := r.announce(ip, r.counters.Gratuitous); err != nil {
				r.log.V(1).Info("repeating announcement failed", "ip", ip, "error", err.Error())
			}
		}
	}
}

// Silence stops answering and announcing at once and keeps the sockets open. A speaker leaving
// (SIGTERM) silences its responders, tells the others, then closes them: closing a packet
// socket waits for the kernel's RCU grace period (packet_release, about 8 ms measured here),
// which would otherwise delay the takeover by as much.
func (r *Responder) Silence() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.silence()
}

func (r *Responder) silence() {
	r.silent = true
	r.owned.Store(&map[netip.Addr]struct{}{})
}

// Close stops answering at once and releases the sockets.
func (r *Responder) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.silence()
	close(r.stop)
	err := r.arp.Close()
	if r.ndp != nil {
		err = errors.Join(err, r.ndp.Close())
	}
	r.mu.Unlock()
	r.wg.Wait()
	return err
}

func (r *Responder) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// readFailed decides what a read error means: the end when the responder is closed, otherwise
// a pause (a link that is down fails every read) and another try. Hostile or broken input never
// ends a loop.
func (r *Responder) readFailed(proto string, err error, failures *int) (stop bool) {
	if r.stopped() {
		return true
	}
	*failures++
	if *failures == 1 || *failures%100 == 0 {
		r.log.Info("read failed, retrying", "protocol", proto, "error", err.Error(), "failures", *failures)
	}
	t := time.NewTimer(min(time.Duration(*failures)*10*time.Millisecond, time.Second))
	defer t.Stop()
	select {
	case <-r.stop:
		return true
	case <-t.C:
		return false
	}
}

func (r *Responder) serveARP() {
	defer r.wg.Done()
	buf := make([]byte, 1514)
	failures := 0
	for {
		n, _, err := r.arp.ReadFrom(buf)
		if err != nil {
			if r.readFailed("arp", err, &failures) {
				return
			}
			continue
		}
		failures = 0
		reply := arpReply(buf[:n], r.ifi.HardwareAddr, r.owns)
		if reply == nil {
			continue
		}
		r.counters.Request("arp")
		if _, err := r.arp.WriteTo(reply, &packet.Addr{HardwareAddr: net.HardwareAddr(reply[0:6])}); err != nil {
			r.log.V(1).Info("ARP reply failed", "error", err.Error())
			continue
		}
		r.counters.Reply("arp")
	}
}

func (r *Responder) serveNDP() {
	defer r.wg.Done()
	buf := make([]byte, max(r.ifi.MTU, 1280))
	failures := 0
	for {
		n, cm, src, err := r.ndp.ReadRaw(buf)
		if err != nil {
			if r.readFailed("ndp", err, &failures) {
				return
			}
			continue
		}
		failures = 0
		hop := -1
		if cm != nil {
			hop = cm.HopLimit
		}
		na, dst, ok := naFor(buf[:n], src, hop, r.ifi.HardwareAddr, r.owns)
		if !ok {
			continue
		}
		r.counters.Request("ndp")
		if err := r.ndp.WriteTo(na, nil, dst); err != nil {
			r.log.V(1).Info("NDP advertisement failed", "error", err.Error())
			continue
		}
		r.counters.Reply("ndp")
	}
}

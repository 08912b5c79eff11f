package netlab

import (
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// An Announcement is a gratuitous ARP request (sender and target both IP) or an unsolicited
// neighbour advertisement for IP, heard on a host's eth0 from MAC.
type Announcement struct {
	IP  netip.Addr
	MAC string
	At  time.Time
}

// An AnnouncementRecorder keeps the announcements a host hears, as a switch or a client on the
// LAN does, from a raw socket on its eth0 (its own kernel sends nothing).
type AnnouncementRecorder struct {
	conn *packet.Conn
	done chan struct{}

	mu  sync.Mutex
	got []Announcement
}

// RecordAnnouncements starts recording on h's eth0 until Close.
func RecordAnnouncements(h Host) (*AnnouncementRecorder, error) {
	r := &AnnouncementRecorder{done: make(chan struct{})}
	err := In(h.NS, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		r.conn, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	go r.read()
	return r, nil
}

func (r *AnnouncementRecorder) read() {
	defer close(r.done)
	buf := make([]byte, 1600)
	for {
		n, _, err := r.conn.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		if a, ok := announcementIn(buf[:n]); ok {
			a.At = time.Now()
			r.mu.Lock()
			r.got = append(r.got, a)
			r.mu.Unlock()
		}
	}
}

// announcementIn reads an Ethernet frame: a gratuitous ARP request, or an ICMPv6 neighbour
// advertisement without the solicited flag carried directly by IPv6 (no extension header).
func announcementIn(b []byte) (Announcement, bool) {
	var f ethernet.Frame
	if f.UnmarshalBinary(b) != nil {
		return Announcement{}, false
	}
	switch f.EtherType {
	case ethernet.EtherTypeARP:
		var p arp.Packet
		if p.UnmarshalBinary(f.Payload) != nil || p.Operation != arp.OperationRequest || p.SenderIP != p.TargetIP {
			return Announcement{}, false
		}
		return Announcement{IP: p.SenderIP, MAC: p.SenderHardwareAddr.String()}, true
	case ethernet.EtherTypeIPv6:
		const header = 40
		if len(f.Payload) < header || f.Payload[6] != 58 { // ICMPv6
			return Announcement{}, false
		}
		m, err := ndp.ParseMessage(f.Payload[header:])
		na, ok := m.(*ndp.NeighborAdvertisement)
		if err != nil || !ok || na.Solicited {
			return Announcement{}, false
		}
		return Announcement{IP: na.TargetAddress, MAC: f.Source.String()}, true
	}
	return Announcement{}, false
}

// Count is how many announcements of ip were heard from from to to.
func (r *AnnouncementRecorder) Count(ip netip.Addr, from, to time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, a := range r.got {
		if a.IP == ip && !a.At.Before(from) && a.At.Before(to) {
			n++
		}
	}
	return n
}

// First is when ip was first announced (zero: never).
func (r *AnnouncementRecorder) First(ip netip.Addr) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.got {
		if a.IP == ip {
			return a.At
		}
	}
	return time.Time{}
}

// Senders are the MACs ip was announced from, in the order first heard.
func (r *AnnouncementRecorder) Senders(ip netip.Addr) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, a := range r.got {
		if a.IP == ip && !slices.Contains(out, a.MAC) {
			out = append(out, a.MAC)
		}
	}
	return out
}

// Last is when ip was last announced (zero: never).
func (r *AnnouncementRecorder) Last(ip netip.Addr) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.got) - 1; i >= 0; i-- {
		if r.got[i].IP == ip {
			return r.got[i].At
		}
	}
	return time.Time{}
}

// Close stops recording.
func (r *AnnouncementRecorder) Close() {
	_ = r.conn.Close()
	<-r.done
}

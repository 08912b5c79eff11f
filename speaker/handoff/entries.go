package handoff

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ForgetClosed deletes this node's entries of connections to addr that are over (TIME_WAIT,
// CLOSE: two minutes), for a node taking addr over. Such an entry is of an earlier connection
// of this node's own, and a connection the previous owner holds may reuse its client port
// (busy clients run through their ports in minutes, and addresses go back and forth): its
// packets met the entry here, not new, so never picked up, and out of its window, invalid and
// untranslated; they went nowhere, and the connection stalled for good (seen on the kubelet
// cluster: keep-alive connections stalled at a move). It reads the whole table (netlink dump),
// so the caller need not wait for it: until it is done such a connection's packets are lost
// and retransmitted.
func (h *Handoff) ForgetClosed(addr netip.Addr) error {
	addr = addr.Unmap()
	family := netlink.InetFamily(unix.AF_INET6)
	if addr.Is4() {
		family = unix.AF_INET
	}
	err := deleteEntries([]netlink.InetFamily{family}, func(e *netlink.ConntrackFlow) bool {
		return closed(e) && e.Forward.DstIP.Equal(addr.AsSlice())
	})
	if err != nil {
		return fmt.Errorf("deleting the entries of closed connections to %s: %w", addr, err)
	}
	return nil
}

// forget deletes this node's connection-tracking entries that match: those of flows picked up
// for a hand-off that has ended. Such an entry saw only the client's side of its connection, so
// it outlives the connection by minutes (FIN_WAIT, or ESTABLISHED for one cut short), its mark
// with it; a new connection from the same client port (busy clients run through their ports in
// that time) would follow the mark to a route that is no more, and its SYNs go nowhere (seen on
// the kubelet cluster: new connections failing with 1 s gaps long after a move). Without the
// entry, such a SYN is a new connection like any other.
func forget(match func(*netlink.ConntrackFlow) bool) error {
	if err := deleteEntries([]netlink.InetFamily{unix.AF_INET, unix.AF_INET6}, match); err != nil {
		return fmt.Errorf("%w: %w", ErrEntriesLeft, err)
	}
	return nil
}

// ErrEntriesLeft says that the connection-tracking entries of an ended hand-off could not be
// deleted; the rest of it is undone.
var ErrEntriesLeft = errors.New("the connection-tracking entries of an ended hand-off are left")

// deleteEntries deletes the entries of the families that match, each read again just before
// its delete. vishvananda/netlink reads the whole table, then deletes the matches one by one,
// each by its tuple and the ID it was read with; but between the read and a delete a closed
// entry may be reopened: a client's SYN from the same port ends it and opens a new one, and
// the kernel, reusing the memory, may give the new entry the same ID (seen in about one
// reopening in five here), so the delete took a new connection (the likeliest cause of one
// lost at a takeover on the kubelet cluster: its entry went, and its answer with it, while
// ForgetClosed ran). The kernel has no delete-if-unchanged; the second read (ti-mo/conntrack's
// Get: vishvananda has none, and ti-mo's Delete sends no ID) narrows the race from the whole
// table's read to one netlink round trip.
func deleteEntries(families []netlink.InetFamily, match func(*netlink.ConntrackFlow) bool) error {
	c, err := conntrack.Dial(nil)
	if err != nil {
		return fmt.Errorf("reading connection-tracking entries: %w", err)
	}
	defer c.Close()
	var errs []error
	for _, family := range families {
		_, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, family, flowMatch(func(e *netlink.ConntrackFlow) bool {
			if !match(e) {
				return false
			}
			beforeRereading()
			return unchanged(c, e)
		}))
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// beforeRereading is a test's seam: the moment between the table's read and an entry's second
// read, when a client may reopen it.
var beforeRereading = func() {}

// unchanged reports whether the table still holds e as read: its TCP state and mark the same
// (a reopened entry starts over, in SYN_SENT, unmarked or marked anew). An entry gone since is
// not unchanged: there is nothing to delete.
func unchanged(c *conntrack.Conn, e *netlink.ConntrackFlow) bool {
	src, ok1 := netip.AddrFromSlice(e.Forward.SrcIP)
	dst, ok2 := netip.AddrFromSlice(e.Forward.DstIP)
	if !ok1 || !ok2 {
		return false
	}
	now, err := c.Get(conntrack.Flow{TupleOrig: conntrack.Tuple{
		IP:    conntrack.IPTuple{SourceAddress: src, DestinationAddress: dst},
		Proto: conntrack.ProtoTuple{Protocol: e.Forward.Protocol, SourcePort: e.Forward.SrcPort, DestinationPort: e.Forward.DstPort},
		Zone:  e.Zone,
	}})
	if err != nil {
		return false
	}
	var state, stateNow uint8
	if tcp, ok := e.ProtoInfo.(*netlink.ProtoInfoTCP); ok {
		state = tcp.State
	}
	if now.ProtoInfo.TCP != nil {
		stateNow = now.ProtoInfo.TCP.State
	}
	return now.Mark == e.Mark && stateNow == state
}

// flowMatch is a func as netlink's conntrack filter.
type flowMatch func(*netlink.ConntrackFlow) bool

func (m flowMatch) MatchConntrackFlow(f *netlink.ConntrackFlow) bool { return m(f) }

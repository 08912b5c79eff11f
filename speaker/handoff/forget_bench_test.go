package handoff_test

import (
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ti-mo/conntrack"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/portico-lb/portico/internal/netlab"
	"github.com/portico-lb/portico/speaker/handoff"
)

// BenchmarkForgetClosed: a node taking an address over deletes its closed entries of it
// (ForgetClosed: one read of the whole table, then a second read and a delete per match) in the
// background. Its time with a table of PORTICO_BENCH_CONNTRACK_ENTRIES entries (default
// 100 000), 1 % of them closed connections to the address, against the kernel's own floor, one
// read of the table; medians of five. It ignores b.N.
func BenchmarkForgetClosed(b *testing.B) {
	netlab.Require(b)
	entries := 100_000
	if v, err := strconv.Atoi(os.Getenv("PORTICO_BENCH_CONNTRACK_ENTRIES")); err == nil {
		entries = v
	}
	closedOnes := entries / 100
	l := netlab.New(b)
	ns := l.AddNamespace("node")
	vip := netip.MustParseAddr("10.0.0.200")
	var h *handoff.Handoff
	var forget, read []time.Duration
	if err := netlab.In(ns, func() (err error) {
		if h, err = handoff.Open(handoff.Defaults); err != nil {
			return err
		}
		defer h.Clear()
		c, err := conntrack.Dial(nil)
		if err != nil {
			return err
		}
		defer c.Close()
		if err := addEntries(c, entries-closedOnes, netip.MustParseAddr("10.96.0.10"), 3); err != nil { // ESTABLISHED, elsewhere
			return err
		}
		for range 5 {
			if err := addEntries(c, closedOnes, vip, 7); err != nil { // TIME_WAIT, to the address
				return err
			}
			start := time.Now()
			if _, err := netlink.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET); err != nil {
				return err
			}
			read = append(read, time.Since(start))
			start = time.Now()
			if err := h.ForgetClosed(vip); err != nil {
				return err
			}
			forget = append(forget, time.Since(start))
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	f, r := median(forget), median(read)
	b.ReportMetric(float64(f.Milliseconds()), "ms/forget")
	b.ReportMetric(float64(r.Milliseconds()), "ms/read")
	b.ReportMetric(float64(f)/float64(r), "forget/read")
}

// addEntries creates n TCP entries to dst in the given conntrack state (3 ESTABLISHED, 7
// TIME_WAIT), from distinct client addresses and ports of 10.1.0.0/16.
func addEntries(c *conntrack.Conn, n int, dst netip.Addr, state uint8) error {
	for i := range n {
		src := netip.AddrFrom4([4]byte{10, 1, byte(i >> 16), byte(i >> 8)})
		f := conntrack.NewFlow(unix.IPPROTO_TCP, conntrack.StatusConfirmed|conntrack.StatusSeenReply|conntrack.StatusAssured,
			src, dst, uint16(1024+i&0xff), 80, 600, 0)
		f.ProtoInfo.TCP = &conntrack.ProtoInfoTCP{State: state}
		if err := c.Create(f); err != nil {
			return err
		}
	}
	return nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

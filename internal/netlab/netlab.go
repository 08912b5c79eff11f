// Package netlab builds throwaway layer-2 labs for root-only tests: network namespaces hanging
// off one Linux bridge by veth pairs. Nothing is
// ever configured in the root namespace, and everything is removed in t.Cleanup.
package netlab

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/portico-lb/portico/internal/ci"
)

// Usable reports why root-only lab tests cannot run here, or "" when they can.
func Usable() string {
	if os.Geteuid() != 0 {
		return "needs root (network namespaces)"
	}
	for _, tool := range []string{"ip", "ping"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "needs " + tool
		}
	}
	return ""
}

// Require stops a test that cannot build a lab here: it skips on a developer's machine without
// root or the tools and fails in CI (internal/ci).
func Require(t ci.T, tools ...string) {
	t.Helper()
	ci.Require(t, Usable(), tools...)
}

var seq atomic.Int32

// T is what a lab needs from its owner: a test, or a program (the root-mode demo) that fails
// and cleans up its own way.
type T interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// TB is T with a temporary directory, removed when it ends: what a router needs.
type TB interface {
	T
	TempDir() string
}

// Lab is one bridge namespace and the hosts attached to it.
type Lab struct {
	t      T
	prefix string
	Switch string // the namespace holding bridge br0
}

// New creates the switch namespace. Names are unique per process and test.
func New(t T) *Lab {
	t.Helper()
	l := &Lab{t: t, prefix: fmt.Sprintf("pt%d-%d", os.Getpid()%100000, seq.Add(1))}
	l.Switch = l.AddNamespace("sw")
	l.MustRun("ip", "-n", l.Switch, "link", "add", "br0", "type", "bridge", "stp_state", "0")
	l.MustRun("ip", "-n", l.Switch, "link", "set", "br0", "up")
	return l
}

// AddNamespace creates an empty namespace with lo up, no IPv6 duplicate address detection (a
// tentative link-local address makes NDP sockets fail) and addresses kept on link down.
func (l *Lab) AddNamespace(role string) string {
	l.t.Helper()
	ns := l.prefix + "-" + role
	l.MustRun("ip", "netns", "add", ns)
	l.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	l.MustRun("ip", "-n", ns, "link", "set", "lo", "up")
	l.MustRun("ip", "netns", "exec", ns, "sysctl", "-qw",
		"net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0",
		"net.ipv6.conf.all.keep_addr_on_down=1", "net.ipv6.conf.default.keep_addr_on_down=1")
	return ns
}

// Host is a namespace with an eth0 plugged into the bridge.
type Host struct {
	NS   string
	Port string // the bridge port in the switch namespace, to cut the link
	MAC  net.HardwareAddr
	IPv4 netip.Prefix
	IPv6 netip.Prefix
}

// AddHost creates namespace role with eth0 (given MAC and addresses) on the bridge.
func (l *Lab) AddHost(role, mac string, v4, v6 string) Host {
	l.t.Helper()
	h := Host{NS: l.AddNamespace(role), Port: fmt.Sprintf("p%d-%s", seq.Add(1), role)}
	if len(h.Port) > 15 {
		h.Port = h.Port[:15]
	}
	var err error
	if h.MAC, err = net.ParseMAC(mac); err != nil {
		l.t.Fatalf("%v", err)
	}
	h.IPv4, h.IPv6 = netip.MustParsePrefix(v4), netip.MustParsePrefix(v6)
	l.MustRun("ip", "-n", l.Switch, "link", "add", h.Port, "type", "veth", "peer", "name", "eth0", "netns", h.NS)
	l.MustRun("ip", "-n", h.NS, "link", "set", "eth0", "address", mac)
	l.MustRun("ip", "-n", h.NS, "addr", "add", v4, "dev", "eth0")
	l.MustRun("ip", "-n", h.NS, "addr", "add", v6, "dev", "eth0", "nodad")
	l.MustRun("ip", "-n", l.Switch, "link", "set", h.Port, "master", "br0", "up")
	l.MustRun("ip", "-n", h.NS, "link", "set", "eth0", "up")
	return h
}

// MustRun runs a command and fails the test with its output when it fails.
func (l *Lab) MustRun(name string, args ...string) string {
	l.t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		l.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Neighbour returns the MAC in ns's neighbour entry for ip, or "" when there is none (or it is
// INCOMPLETE/FAILED).
func Neighbour(ns string, ip netip.Addr) string {
	out, _ := exec.Command("ip", "-n", ns, "neigh", "show", ip.String()).Output()
	f := strings.Fields(string(out))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "lladdr" {
			return f[i+1]
		}
	}
	return ""
}

// Resolve makes ns resolve ip through its kernel (one ping; nothing answers the ping itself,
// only the neighbour entry matters) and returns the MAC it learned, or "".
func Resolve(ns string, ip netip.Addr) string {
	args := []string{"netns", "exec", ns, "ping", "-c1", "-W1"}
	if ip.Is6() {
		args = append(args, "-6")
	}
	_ = exec.Command("ip", append(args, ip.String())...).Run()
	return Neighbour(ns, ip)
}

// NFTTable is nftables table `family name` of namespace ns as nft lists it, or "" when there is
// none.
func NFTTable(ns, family, name string) string {
	out, _ := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", family, name).Output()
	return string(out)
}

// NFTCounted sums the packets counted by the rules of nftables table `family name` in namespace
// ns: 0 when there is no such table.
func NFTCounted(ns, family, name string) int {
	n := 0
	for _, f := range strings.Split(NFTTable(ns, family, name), "counter packets ")[1:] {
		var k int
		fmt.Sscan(f, &k)
		n += k
	}
	return n
}

// UntranslatedFlows are the connection-tracking entries of namespace ns for flows to ip that
// nothing translated: the reply is expected from ip itself.
func UntranslatedFlows(ns string, ip netip.Addr) ([]string, error) {
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/nf_conntrack").Output()
	if err != nil {
		return nil, fmt.Errorf("%s's connection tracking: %w", ns, err)
	}
	var flows []string
	for _, line := range strings.Split(string(out), "\n") {
		// The first dst= is the original direction's destination, the second src= the reply's source.
		var dst, src []string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "dst="); ok {
				dst = append(dst, v)
			} else if v, ok := strings.CutPrefix(f, "src="); ok {
				src = append(src, v)
			}
		}
		if len(dst) > 0 && len(src) > 1 && dst[0] == ip.String() && src[1] == ip.String() {
			flows = append(flows, line)
		}
	}
	return flows, nil
}

// In runs fn on a thread switched into namespace ns. Sockets opened in fn stay in ns; the
// thread is thrown away afterwards, so no other goroutine ever runs in ns by accident.
func In(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the goroutine's exit discards the thread
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// WaitFor polls cond every 10 ms until it holds, failing the test after within. It returns how
// long it waited.
func WaitFor(t T, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
	return time.Since(start)
}

// SendGarbage sends n malformed ARP frames and ICMPv6 neighbour solicitations from namespace ns
// to everyone on its eth0 segment: truncated, with absurd lengths, with a zero-length option.
func SendGarbage(ns string, n int) error {
	bcast := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1}
	arpFrames := [][]byte{
		append(append([]byte{}, bcast...), 0x08, 0x06),                                  // ARP EtherType, no payload
		append(append([]byte{}, bcast...), 0x08, 0x06, 0, 1, 0x08, 0, 0xff, 0xff, 0, 1), // absurd address lengths
		append(append([]byte{}, bcast...), append([]byte{0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1}, make([]byte, 50)...)...),
	}
	icmp := [][]byte{
		{135, 0, 0, 0}, // neighbour solicitation, truncated
		append([]byte{135, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 16)...),                                              // target ::
		append([]byte{135, 0, 0, 0, 0, 0, 0, 0, 0x20, 1, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0x09}, 1, 0), // option length 0
	}
	return In(ns, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		pc, err := packet.Listen(ifi, packet.Raw, int(ethernet.EtherTypeARP), nil)
		if err != nil {
			return err
		}
		defer pc.Close()
		c, err := net.ListenPacket("ip6:ipv6-icmp", "::")
		if err != nil {
			return err
		}
		defer c.Close()
		p6 := ipv6.NewPacketConn(c)
		if err := errors.Join(p6.SetMulticastHopLimit(255), p6.SetMulticastInterface(ifi)); err != nil {
			return err
		}
		all := &net.IPAddr{IP: net.ParseIP("ff02::1"), Zone: "eth0"}
		for i := 0; i < n; i++ {
			if _, err := pc.WriteTo(arpFrames[i%len(arpFrames)], &packet.Addr{HardwareAddr: ethernet.Broadcast}); err != nil {
				return err
			}
			if _, err := p6.WriteTo(icmp[i%len(icmp)], nil, all); err != nil {
				return err
			}
		}
		return nil
	})
}

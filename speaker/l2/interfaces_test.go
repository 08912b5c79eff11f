package l2

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestInterfaces runs testdata/interfaces.txt. "links" reads one link a line (name, kind, then
// the words up, broadcast, loopback, noarp, nocarrier, mac, master=NAME and address prefixes) and prints
// each link's verdict; "answer ip=..." prints the links that answer for ip by default;
// "expand" resolves an advertisement's interfaces, one a line, against the links; "subnets"
// prints where the node can answer (Subnets).
func TestInterfaces(t *testing.T) {
	var links []Link
	datadriven.RunTest(t, "testdata/interfaces.txt", func(t *testing.T, d *datadriven.TestData) string {
		var b strings.Builder
		switch d.Cmd {
		case "links":
			links = nil
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				links = append(links, parseLink(t, line))
			}
			for _, v := range Decide(links) {
				if v.Answers {
					fmt.Fprintf(&b, "%s: answers\n", v.Name)
				} else {
					fmt.Fprintf(&b, "%s: left out: %s\n", v.Name, v.Reason)
				}
			}
		case "answer":
			var ip string
			d.ScanArgs(t, "ip", &ip)
			fmt.Fprintln(&b, strings.Join(ForAddress(netip.MustParseAddr(ip), links, Decide(links)), " "))
		case "subnets":
			for _, p := range Subnets(links) {
				fmt.Fprintln(&b, p)
			}
		case "expand":
			names, problems := Expand(strings.Fields(d.Input), links)
			fmt.Fprintf(&b, "names: %s\n", strings.Join(names, " "))
			for _, p := range problems {
				fmt.Fprintf(&b, "problem: %v\n", p)
			}
		default:
			return "unknown command " + d.Cmd
		}
		return b.String()
	})
}

// TestHoldDown runs testdata/holddown.txt: "seen at=DURATION [reported=PREFIX,...]" takes the
// subnets seen, one a line, and those the node's Speaker status lists, and prints those
// published and when to look again.
func TestHoldDown(t *testing.T) {
	h := &HoldDown{Hold: 2 * time.Second}
	start := time.Unix(0, 0)
	datadriven.RunTest(t, "testdata/holddown.txt", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "seen" {
			return "unknown command " + d.Cmd
		}
		var arg string
		d.ScanArgs(t, "at", &arg)
		at, err := time.ParseDuration(arg)
		if err != nil {
			t.Fatal(err)
		}
		var seen []netip.Prefix
		for _, f := range strings.Fields(d.Input) {
			seen = append(seen, netip.MustParsePrefix(f))
		}
		var reported []netip.Prefix
		if d.HasArg("reported") {
			var list string
			d.ScanArgs(t, "reported", &list)
			for _, f := range strings.Split(list, ",") {
				reported = append(reported, netip.MustParsePrefix(f))
			}
		}
		published, again := h.Update(start.Add(at), seen, reported)
		var b strings.Builder
		fmt.Fprintf(&b, "published: %v\n", published)
		if !again.IsZero() {
			fmt.Fprintf(&b, "again at: %gs\n", again.Sub(start).Seconds())
		}
		return b.String()
	})
}

func parseLink(t *testing.T, line string) Link {
	f := strings.Fields(line)
	l := Link{Name: f[0], Kind: f[1]}
	for _, w := range f[2:] {
		switch {
		case w == "up":
			l.Up = true
		case w == "broadcast":
			l.Broadcast = true
		case w == "loopback":
			l.Loopback = true
		case w == "noarp":
			l.NoARP = true
		case w == "nocarrier":
			l.NoCarrier = true
		case w == "mac":
			l.MAC = net.HardwareAddr{2, 0, 0, 0, 0, byte(len(l.Name))}
		case strings.HasPrefix(w, "master="):
			l.Master = strings.TrimPrefix(w, "master=")
		default:
			p, err := netip.ParsePrefix(w)
			if err != nil {
				t.Fatalf("link %q: %v", line, err)
			}
			l.Prefixes = append(l.Prefixes, p.Masked())
		}
	}
	return l
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"eth*", "eth0", true}, {"eth*", "eth", true}, {"eth*", "veth0", false},
		{"enp*s0", "enp3s0", true}, {"enp*s0", "enp3s0f1", false}, {"enp?s0", "enp12s0", false},
		{"enp??s0", "enp12s0", true}, {"*", "anything", true}, {"br[0]", "br[0]", true}, {"br[0]", "br0", false},
		{"eth0", "eth0", true}, {"eth0", "eth01", false}, {"*lan*", "br-lan0", true},
	} {
		if got := Match(tc.pattern, tc.name); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

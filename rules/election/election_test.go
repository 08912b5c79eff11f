package election

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestTranscripts runs testdata/*.txt. Commands:
//
//	owner ip=IP nodes=(a,b,c) [prefer=(a:100,b:50)]
//	                             the owner of IP among the nodes, the heaviest preferred
//	eligible [local]             one candidate per input line: NAME [dead] [unselected] [excluded] [endpoint]
//	sticky ip=IP nodes=(a,b,c) [prefer=(a:100)] [holders=(a@10,b@20)]
//	                             the owner among the (preferred) nodes, given the holders and the
//	                             second they took the address at
//	balance [now=S] [settle=S]   one address per input line: IP nodes=(a,b,c) [holders=(a@10)];
//	                             each owner is elected by Sticky, then the move Balance picks
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "owner":
				var ipArg string
				d.ScanArgs(t, "ip", &ipArg)
				nodes, weights := argVals(d.CmdArgs, "nodes"), weightsArg(t, argVals(d.CmdArgs, "prefer"))
				ip, err := netip.ParseAddr(ipArg)
				if err != nil {
					return "error " + err.Error()
				}
				owner, ok := Owner(ip, Preferred(nodes, weights))
				if !ok {
					return "none"
				}
				return owner
			case "sticky":
				var ipArg string
				d.ScanArgs(t, "ip", &ipArg)
				ip, err := netip.ParseAddr(ipArg)
				if err != nil {
					return "error " + err.Error()
				}
				nodes := Preferred(argVals(d.CmdArgs, "nodes"), weightsArg(t, argVals(d.CmdArgs, "prefer")))
				owner, ok := Sticky(ip, nodes, holdersArg(t, argVals(d.CmdArgs, "holders")))
				if !ok {
					return "none"
				}
				return owner
			case "balance":
				return balanceTranscript(t, d)
			case "eligible":
				var cands []Candidate
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					f := strings.Fields(line)
					if len(f) == 0 {
						continue
					}
					c := Candidate{Name: f[0], Alive: true, Selected: true}
					for _, flag := range f[1:] {
						switch flag {
						case "dead":
							c.Alive = false
						case "unselected":
							c.Selected = false
						case "excluded":
							c.Excluded = true
						case "notready":
							c.NotReady = true
						case "nonetwork":
							c.NetworkUnavailable = true
						case "outofservice":
							c.OutOfService = true
						case "cordoned":
							c.Cordoned = true
						case "endpoint":
							c.LocalEndpoint = true
						default:
							t.Fatalf("%s: unknown flag %q", d.Pos, flag)
						}
					}
					cands = append(cands, c)
				}
				names, why := Eligible(cands, Policy{LocalOnly: d.HasArg("local")})
				if len(names) == 0 {
					return "none: " + why
				}
				return strings.Join(names, " ")
			default:
				t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
				return ""
			}
		})
	})
}

// epoch is second 0 of the transcripts' clock.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func argVals(args []datadriven.CmdArg, key string) []string {
	for _, a := range args {
		if a.Key == key {
			return a.Vals
		}
	}
	return nil
}

func seconds(t *testing.T, s string) time.Time {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: want seconds: %v", s, err)
	}
	return epoch.Add(time.Duration(n) * time.Second)
}

func weightsArg(t *testing.T, vals []string) map[string]int32 {
	weights := map[string]int32{}
	for _, v := range vals {
		node, w, _ := strings.Cut(v, ":")
		n, err := strconv.Atoi(w)
		if err != nil {
			t.Fatalf("prefer %q: %v", v, err)
		}
		weights[node] = int32(n)
	}
	return weights
}

// holdersArg reads node@second entries.
func holdersArg(t *testing.T, vals []string) []Holder {
	var out []Holder
	for _, v := range vals {
		node, at, ok := strings.Cut(v, "@")
		if !ok {
			t.Fatalf("holder %q: want node@second", v)
		}
		out = append(out, Holder{Node: node, Since: seconds(t, at)})
	}
	return out
}

// balanceTranscript elects each input line's owner (Sticky) and prints the load and the move.
func balanceTranscript(t *testing.T, d *datadriven.TestData) string {
	now, settle := epoch.Add(1000*time.Second), 60*time.Second
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "now":
			now = seconds(t, a.Vals[0])
		case "settle":
			settle = seconds(t, a.Vals[0]).Sub(epoch)
		}
	}
	var ps []Placement
	load := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		ip, err := netip.ParseAddr(f[0])
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		p := Placement{IP: ip}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			list := strings.Split(strings.Trim(v, "()"), ",")
			switch k {
			case "nodes":
				p.Nodes = list
			case "holders":
				p.Holders = holdersArg(t, list)
			default:
				t.Fatalf("%s: unknown %q", d.Pos, k)
			}
		}
		p.Owner, _ = Sticky(ip, p.Nodes, p.Holders)
		load[p.Owner]++
		ps = append(ps, p)
	}
	var b strings.Builder
	b.WriteString("owners:")
	for _, n := range slices.Sorted(maps.Keys(load)) {
		fmt.Fprintf(&b, " %s=%d", n, load[n])
	}
	b.WriteString("\n")
	switch m, ok, at := Balance(ps, now, settle); {
	case ok:
		fmt.Fprintf(&b, "move %s from %s to %s\n", m.IP, m.From, m.To)
	case !at.IsZero():
		fmt.Fprintf(&b, "none until second %d\n", int(at.Sub(epoch)/time.Second))
	default:
		b.WriteString("none\n")
	}
	return b.String()
}

func addrs(first string, n int) []netip.Addr {
	ip := netip.MustParseAddr(first)
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = ip
		ip = ip.Next()
	}
	return out
}

func owners(t *testing.T, ips []netip.Addr, nodes []string) map[netip.Addr]string {
	t.Helper()
	m := make(map[netip.Addr]string, len(ips))
	for _, ip := range ips {
		o, ok := Owner(ip, nodes)
		if !ok {
			t.Fatalf("no owner for %v among %v", ip, nodes)
		}
		m[ip] = o
	}
	return m
}

// TestSpread: 300 addresses over 3 nodes, no node owns more than 120 (the bound), for
// both families and a few node namings. A hash gives a binomial spread (standard deviation
// about 8 around 100 here), so the lower side is checked on a larger set below.
func TestSpread(t *testing.T) {
	for _, first := range []string{"198.51.100.0", "10.0.0.200", "2001:db8::1"} {
		for _, nodes := range [][]string{{"node-a", "node-b", "node-c"}, {"worker-1", "worker-2", "worker-3"}, {"a", "b", "c"}} {
			t.Run(fmt.Sprintf("%s/%s", first, nodes[0]), func(t *testing.T) {
				count := map[string]int{}
				for _, o := range owners(t, addrs(first, 300), nodes) {
					count[o]++
				}
				for _, n := range nodes {
					if count[n] > 120 {
						t.Errorf("%s owns %d of 300 addresses, want at most 120 (all: %v)", n, count[n], count)
					}
				}
			})
		}
	}
}

// TestSpreadLarge: over 30000 addresses each of 3 nodes owns 10000±500 (six standard
// deviations), so no node is systematically favoured.
func TestSpreadLarge(t *testing.T) {
	nodes := []string{"node-a", "node-b", "node-c"}
	count := map[string]int{}
	for _, o := range owners(t, addrs("2001:db8:5::", 30000), nodes) {
		count[o]++
	}
	for _, n := range nodes {
		if count[n] < 9500 || count[n] > 10500 {
			t.Errorf("%s owns %d of 30000, want 9500..10500 (all: %v)", n, count[n], count)
		}
	}
}

// TestJoinMovesOnlyWhatTheNewNodeTakes: when a fourth node joins, every address that changes
// owner goes to the new node, and it takes about a quarter of them.
func TestJoinMovesOnlyWhatTheNewNodeTakes(t *testing.T) {
	ips := addrs("198.51.100.0", 1000)
	before := owners(t, ips, []string{"node-a", "node-b", "node-c"})
	after := owners(t, ips, []string{"node-a", "node-b", "node-c", "node-d"})
	moved := 0
	for _, ip := range ips {
		if before[ip] == after[ip] {
			continue
		}
		moved++
		if after[ip] != "node-d" {
			t.Fatalf("%v moved from %s to %s, but only the joining node may take addresses", ip, before[ip], after[ip])
		}
	}
	if moved < 200 || moved > 300 {
		t.Errorf("joining node took %d of 1000 addresses, want about 250", moved)
	}
}

// TestLeaveMovesOnlyTheLeaversAddresses: when a node leaves, the addresses of the others stay.
func TestLeaveMovesOnlyTheLeaversAddresses(t *testing.T) {
	ips := addrs("2001:db8::1", 1000)
	before := owners(t, ips, []string{"node-a", "node-b", "node-c"})
	after := owners(t, ips, []string{"node-a", "node-c"})
	for _, ip := range ips {
		if before[ip] != "node-b" && before[ip] != after[ip] {
			t.Fatalf("%v moved from %s to %s although %s is still alive", ip, before[ip], after[ip], before[ip])
		}
	}
}

// TestOrderDoesNotMatter: every speaker lists members in its own order; they must agree.
func TestOrderDoesNotMatter(t *testing.T) {
	for _, ip := range addrs("203.0.113.0", 256) {
		a, _ := Owner(ip, []string{"x", "y", "z"})
		b, _ := Owner(ip, []string{"z", "x", "y", "x"})
		if a != b {
			t.Fatalf("%v: %s with one order, %s with another", ip, a, b)
		}
	}
}

// TestMappedAddressIsTheSameAddress: ::ffff:a.b.c.d and a.b.c.d must have one owner, whatever
// form a parser hands us.
func TestMappedAddressIsTheSameAddress(t *testing.T) {
	nodes := []string{"a", "b", "c", "d", "e"}
	for _, ip := range addrs("198.51.100.0", 64) {
		mapped := netip.AddrFrom16(ip.As16())
		a, _ := Owner(ip, nodes)
		b, _ := Owner(mapped, nodes)
		if a != b {
			t.Fatalf("%v owned by %s but %v by %s", ip, a, mapped, b)
		}
	}
}

// FuzzOwner: the owner is always one of the eligible nodes and independent of their order.
func FuzzOwner(f *testing.F) {
	f.Add([]byte{198, 51, 100, 7}, "a,b,c")
	f.Add([]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, "node-1")
	f.Fuzz(func(t *testing.T, raw []byte, list string) {
		ip, ok := netip.AddrFromSlice(raw)
		if !ok {
			return
		}
		nodes := strings.Split(list, ",")
		o, ok := Owner(ip, nodes)
		if !ok {
			t.Fatalf("no owner among %q", nodes)
		}
		found := false
		for _, n := range nodes {
			found = found || n == o
		}
		if !found {
			t.Fatalf("owner %q not among %q", o, nodes)
		}
		rev := make([]string, len(nodes))
		for i, n := range nodes {
			rev[len(nodes)-1-i] = n
		}
		if o2, _ := Owner(ip, rev); o2 != o {
			t.Fatalf("order changed owner: %q vs %q", o, o2)
		}
	})
}

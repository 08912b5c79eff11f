package allocator

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/portico-lb/portico/rules"
)

// TestAllocator runs the transcripts in testdata/alloc/*.txt. Commands:
//
//	pools                  one pool a line: NAME RANGE[,RANGE...] [auto=false] [buggy] [selection] [priority=N] [across]
//	allocate svc=NS/NAME [family=(4,6)] [dual=prefer|require] [ip=(...)] [pool=P] [key=K]
//	         [ports=(TCP/80,...)] [local] [selector=S] [selected=(P,...)]
//	restore svc=NS/NAME ip=(...) [the same request arguments]
//	release svc=NS/NAME
//	inuse [ip=(...)]       the addresses foreign hosts answer for (SetInUse); none: no address
//	next pool=P [n=N]      the pool's next addresses (NextAddresses; n defaults to 4)
//	stats                  every pool's counts
//	show                   every assignment
func TestAllocator(t *testing.T) {
	datadriven.Walk(t, "testdata/alloc", func(t *testing.T, path string) {
		a := New()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return runCommand(t, a, d)
		})
	})
}

func runCommand(t *testing.T, a *Allocator, d *datadriven.TestData) string {
	switch d.Cmd {
	case "pools":
		pools, err := parsePools(d.Input)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		a.SetPools(pools)
		return show(a)
	case "allocate":
		req := parseRequest(t, d)
		asg, err := a.Allocate(req)
		return describe(req.Service, asg, err)
	case "restore":
		req := parseRequest(t, d)
		ips := req.IPs
		req.IPs = nil
		asg, err := a.Restore(req, ips)
		return describe(req.Service, asg, err)
	case "release":
		var svc string
		d.ScanArgs(t, "svc", &svc)
		freed := a.Release(svc)
		if len(freed) == 0 {
			return "freed nothing\n"
		}
		return "freed " + commaAddrs(freed) + "\n"
	case "inuse":
		if a.SetInUse(parseRequest(t, d).IPs) {
			return "released an address\n"
		}
		return "released nothing\n"
	case "next":
		var pool string
		n := 4
		d.ScanArgs(t, "pool", &pool)
		if d.HasArg("n") {
			d.ScanArgs(t, "n", &n)
		}
		return "next " + commaAddrs(a.NextAddresses(pool, n)) + "\n"
	case "stats":
		return stats(a)
	case "show":
		return show(a)
	}
	d.Fatalf(t, "unknown command %s", d.Cmd)
	return ""
}

func describe(svc string, asg Assignment, err error) string {
	if err != nil {
		return fmt.Sprintf("%s: %v\n", svc, err)
	}
	return fmt.Sprintf("%s: %s%s\n", svc, commaAddrs(asg.IPs), poolNote(asg))
}

func poolNote(asg Assignment) string {
	if asg.Orphaned() {
		return " (orphaned: in no pool)"
	}
	return " (pool " + asg.Pool + ")"
}

func show(a *Allocator) string {
	var svcs []string
	for s := range a.services {
		svcs = append(svcs, s)
	}
	slices.Sort(svcs)
	var b strings.Builder
	for _, s := range svcs {
		b.WriteString(describe(s, a.current(s), nil))
	}
	if b.Len() == 0 {
		return "no assignments\n"
	}
	return b.String()
}

func stats(a *Allocator) string {
	var b strings.Builder
	for _, p := range a.order {
		s, _ := a.Stats(p.Name)
		fmt.Fprintf(&b, "%s:", p.Name)
		for i, fam := range []Family{IPv4, IPv6} {
			if s.Size[i].Sign() > 0 {
				fmt.Fprintf(&b, " %s size %s assigned %d available %s;", fam, s.Size[i], s.Assigned[i], s.Available[i])
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func parsePools(input string) ([]Pool, error) {
	var pools []Pool
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		if line == "" {
			continue // no pools at all
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil, fmt.Errorf("pool line %q: want NAME RANGES [flags]", line)
		}
		p := Pool{Name: f[0], AutoAssign: true}
		ranges, errs := rules.ParsePool(strings.Split(f[1], ","))
		if len(errs) > 0 {
			return nil, fmt.Errorf("pool %s: %v", p.Name, errs)
		}
		p.Ranges = ranges
		for _, flag := range f[2:] {
			switch k, v, _ := strings.Cut(flag, "="); k {
			case "auto":
				p.AutoAssign = v != "false"
			case "buggy":
				p.AvoidBuggyIPs = true
			case "selection":
				p.HasServiceAllocation = true
			case "across":
				p.SharingAcrossNamespaces = true
			case "priority":
				n, err := strconv.Atoi(v)
				if err != nil {
					return nil, err
				}
				p.Priority = int32(n)
			default:
				return nil, fmt.Errorf("pool %s: unknown flag %q", p.Name, flag)
			}
		}
		pools = append(pools, p)
	}
	return pools, nil
}

func parseRequest(t *testing.T, d *datadriven.TestData) Request {
	var req Request
	for _, arg := range d.CmdArgs {
		switch arg.Key {
		case "svc":
			req.Service = arg.Vals[0]
		case "family":
			for _, v := range arg.Vals {
				req.Families = append(req.Families, Family(mustAtoi(t, d, v)))
			}
		case "dual":
			req.DualStack = map[string]DualStack{"prefer": PreferDualStack, "require": RequireDualStack}[arg.Vals[0]]
		case "ip":
			for _, v := range arg.Vals {
				ip, err := netip.ParseAddr(v)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				req.IPs = append(req.IPs, ip)
			}
		case "pool":
			req.Pool = arg.Vals[0]
		case "key":
			req.SharingKey = arg.Vals[0]
		case "ports":
			for _, v := range arg.Vals {
				proto, port, _ := strings.Cut(v, "/")
				req.Ports = append(req.Ports, Port{Protocol: proto, Port: int32(mustAtoi(t, d, port))})
			}
		case "local":
			req.Local = true
		case "selector":
			req.Selector = arg.Vals[0]
		case "selected":
			req.Selected = arg.Vals
		default:
			d.Fatalf(t, "unknown argument %s", arg.Key)
		}
	}
	return req
}

func mustAtoi(t *testing.T, d *datadriven.TestData, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	return n
}

package allocator

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/portico-lb/portico/rules"
)

// TestAllocator runs the transcripts in testdata/alloc/*.txt. Commands:
//
//	pools                  one pool a line: NAME RANGE[,RANGE...] [auto=false] [buggy] [selection] [priority=N] [across] [hold=DURATION]
//	allocate svc=NS/NAME [family=(4,6)] [dual=prefer|require] [ip=(...)] [pool=P] [key=K]
//	         [ports=(TCP/80,...)] [local] [selector=S] [selected=(P,...)]
//	restore svc=NS/NAME ip=(...) [the same request arguments]
//	release svc=NS/NAME
//	delete svc=NS/NAME [max=N]   the Service is gone: release, holding in pools with hold= (HoldReleased; at most N holds a pool, 1024)
//	restore-hold svc=NS/NAME ip=A pool=P for=DURATION [key=K]  a hold read back from a pool's status (RestoreHold)
//	tick DURATION          the clock moves on; the holds whose time is up end (Expire)
//	holds                  every pool's holds
//	inuse [ip=(...)] [mac=(...)]  the addresses foreign hosts answer for (SetInUse; each from the
//	                       MAC at its place, else 52:54:00:00:00:01); none: no address
//	next pool=P [n=N]      the pool's next addresses (NextAddresses; n defaults to 4)
//	stats                  every pool's counts
//	show                   every assignment
func TestAllocator(t *testing.T) {
	datadriven.Walk(t, "testdata/alloc", func(t *testing.T, path string) {
		a := New()
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "delete", "restore-hold", "tick", "holds":
				return runHoldCommand(t, a, &now, d)
			}
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
		var ips, macs []string
		for _, arg := range d.CmdArgs {
			switch arg.Key {
			case "ip":
				ips = arg.Vals
			case "mac":
				macs = arg.Vals
			default:
				d.Fatalf(t, "unknown argument %s", arg.Key)
			}
		}
		found := map[netip.Addr]string{}
		for i, ip := range ips {
			found[netip.MustParseAddr(ip)] = "52:54:00:00:00:01" // the LAN's router, unless named
			if i < len(macs) {
				found[netip.MustParseAddr(ip)] = macs[i]
			}
		}
		if a.SetInUse(found) {
			return "released an address\n"
		}
		return "released nothing\n"
	case "next":
		return "next " + commaAddrs(a.NextAddresses(argOf(t, d, "pool"), intArg(t, d, "n", 4))) + "\n"
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
	switch {
	case asg.Pool() == "":
		return " (orphaned: in no pool)"
	case !asg.Orphaned() && !strings.Contains(asg.Pool(), ","):
		return " (pool " + asg.Pool() + ")"
	}
	each := make([]string, len(asg.Pools)) // a pool per family, or an address in none
	for i, p := range asg.Pools {
		each[i] = cmp.Or(p, "orphaned")
	}
	return " (pools " + strings.Join(each, ",") + ")"
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
				held := ""
				if s.Held[i] > 0 {
					held = fmt.Sprintf(" held %d", s.Held[i])
				}
				fmt.Fprintf(&b, " %s size %s assigned %d%s available %s;", fam, s.Size[i], s.Assigned[i], held, s.Available[i])
			}
		}
		if s.InUse > 0 {
			fmt.Fprintf(&b, " of those available, in use by foreign hosts %d (%s);", s.InUse, NamedMACs(s.InUseMACs))
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
			case "hold":
				d, err := time.ParseDuration(v)
				if err != nil {
					return nil, err
				}
				p.HoldFor = d
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
			req.Pools = arg.Vals
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

// runHoldCommand runs the commands about holds, at the transcript's time.
func runHoldCommand(t *testing.T, a *Allocator, now *time.Time, d *datadriven.TestData) string {
	var b strings.Builder
	switch d.Cmd {
	case "delete":
		freed, held := a.HoldReleased(argOf(t, d, "svc"), *now, intArg(t, d, "max", 1024))
		if len(freed) == 0 {
			b.WriteString("freed nothing\n")
		} else {
			fmt.Fprintf(&b, "freed %s\n", commaAddrs(freed))
		}
		for _, x := range held {
			fmt.Fprintf(&b, "held %s\n", holdLine(x, *now))
		}
	case "restore-hold":
		x := Hold{Service: argOf(t, d, "svc"), IP: netip.MustParseAddr(argOf(t, d, "ip")), Pool: argOf(t, d, "pool")}
		dur, err := time.ParseDuration(argOf(t, d, "for"))
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		x.Until = now.Add(dur)
		if d.HasArg("key") {
			x.SharingKey = argOf(t, d, "key")
		}
		fmt.Fprintf(&b, "restored %t\n", a.RestoreHold(x))
	case "tick":
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		*now = now.Add(dur)
		for _, x := range a.Expire(*now) {
			fmt.Fprintf(&b, "expired %s\n", holdLine(x, *now))
		}
	case "holds":
		for _, p := range a.order {
			for _, x := range a.Holds(p.Name) {
				fmt.Fprintf(&b, "%s: %s\n", p.Name, holdLine(x, *now))
			}
		}
	}
	if b.Len() == 0 {
		return "none\n"
	}
	return b.String()
}

// holdLine tells a hold, its end as a time from now.
func holdLine(x Hold, now time.Time) string {
	key := ""
	if x.SharingKey != "" {
		key = " key " + x.SharingKey
	}
	return fmt.Sprintf("%s for %s%s in pool %s, ends in %s", x.IP, x.Service, key, x.Pool, x.Until.Sub(now))
}

func argOf(t *testing.T, d *datadriven.TestData, key string) string {
	var v string
	d.ScanArgs(t, key, &v)
	return v
}

// intArg is the command's integer argument key, or def when it has none.
func intArg(t *testing.T, d *datadriven.TestData, key string, def int) int {
	if d.HasArg(key) {
		d.ScanArgs(t, key, &def)
	}
	return def
}

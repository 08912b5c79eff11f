package decide

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
)

// TestJudgeProbes runs testdata/probes/findings.txt: what the speakers' conflict probes hold back.
// Times are durations relative to the judgement's base time.
//
//	pool <name> [disabled] [proxies=MAC,...]   a pool: its addresses one a line; proxies are
//	                                           those its status lists already
//	speaker <name> [not-ready] [probed=D] [macs=MAC,...]
//	                                           a Speaker: its foreign answers one a line,
//	                                           "IP MAC [since=D]"; probed is status.probedAt
//	                                           (none without it), macs its hardwareAddrs
//	judge [at=D]                               the verdict at base+D: the addresses held
//	                                           back, each pool's proxy answerers and condition,
//	                                           and when the next answer stops counting
func TestJudgeProbes(t *testing.T) {
	base := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	rel := func(s string) time.Time {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return base.Add(d)
	}
	var pools []porticov1.IPAddressPool
	var speakers []porticov1.Speaker
	datadriven.RunTest(t, "testdata/probes/findings.txt", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "pool":
			p := porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: d.CmdArgs[0].Key}}
			for _, line := range strings.Fields(d.Input) {
				p.Spec.Addresses = append(p.Spec.Addresses, porticov1.AddressRange(line))
			}
			if d.HasArg("disabled") {
				p.Spec.ConflictProbing = porticov1.ConflictProbingDisabled
			}
			if d.HasArg("proxies") {
				var macs string
				d.ScanArgs(t, "proxies", &macs)
				for _, mac := range strings.Split(macs, ",") {
					p.Status.ProxyAnswerers = append(p.Status.ProxyAnswerers, porticov1.ProxyAnswerer{MAC: mac})
				}
			}
			pools = slices.DeleteFunc(pools, func(o porticov1.IPAddressPool) bool { return o.Name == p.Name })
			pools = append(pools, p)
			return ""
		case "speaker":
			s := porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: d.CmdArgs[0].Key}}
			ready := metav1.ConditionTrue
			if d.HasArg("not-ready") {
				ready = metav1.ConditionFalse
			}
			s.Status.Conditions = []metav1.Condition{{Type: porticov1.ConditionReady, Status: ready}}
			if d.HasArg("probed") {
				var at string
				d.ScanArgs(t, "probed", &at)
				s.Status.ProbedAt = &metav1.Time{Time: rel(at)}
			}
			if d.HasArg("macs") {
				var macs string
				d.ScanArgs(t, "macs", &macs)
				s.Status.HardwareAddrs = strings.Split(macs, ",")
			}
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				f := strings.Fields(line)
				if len(f) < 2 {
					continue
				}
				a := porticov1.ForeignAnswer{IP: f[0], MAC: f[1], Interface: "eth0", Since: metav1.Time{Time: base}}
				if len(f) > 2 {
					a.Since = metav1.Time{Time: rel(strings.TrimPrefix(f[2], "since="))}
				}
				s.Status.ForeignAnswers = append(s.Status.ForeignAnswers, a)
			}
			speakers = slices.DeleteFunc(speakers, func(o porticov1.Speaker) bool { return o.Name == s.Name })
			speakers = append(speakers, s)
			return ""
		case "judge":
			now := base
			if d.HasArg("at") {
				var at string
				d.ScanArgs(t, "at", &at)
				now = rel(at)
			}
			v := JudgeProbes(speakers, pools, now)
			var b strings.Builder
			for _, f := range v.InUse {
				fmt.Fprintf(&b, "held back: %s by %s (heard by %s since %s)\n", f.Address, f.MAC, f.SeenBy, f.Since.Sub(base))
			}
			if len(v.InUse) == 0 {
				fmt.Fprintln(&b, "held back: nothing")
			}
			for _, p := range pools {
				for _, x := range v.Proxies[p.Name] {
					fmt.Fprintf(&b, "%s: proxy answerer %s (answers for %d, heard by %s since %s)\n", p.Name, x.MAC, x.Addresses, x.SeenBy, x.Since.Sub(base))
				}
				var inUse []porticov1.AddressInUse
				for _, f := range v.InUse {
					if inPool(&p, f.Addr) {
						inUse = append(inUse, f.AddressInUse)
					}
				}
				c := InUseCondition(p.ProbesConflicts(), inUse, v.Proxies[p.Name])
				fmt.Fprintf(&b, "%s: %s %s %s: %s\n", p.Name, c.Type, c.Status, c.Reason, c.Message)
			}
			if v.Expires.IsZero() {
				fmt.Fprintln(&b, "expires: never")
			} else {
				fmt.Fprintf(&b, "expires: %s\n", v.Expires.Sub(now))
			}
			return b.String()
		}
		t.Fatalf("unknown command %q", d.Cmd)
		return ""
	})
}

// inPool says whether the pool's spec holds ip.
func inPool(p *porticov1.IPAddressPool, ip netip.Addr) bool {
	ranges, _ := rules.PoolRanges(p)
	return slices.ContainsFunc(ranges, func(r rules.Range) bool { return r.Contains(ip) })
}

package l2

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
)

// TestAnswers runs testdata/answers.txt: which frames heard during a round of conflict probes
// count as answers. "round family=arp|ndp mac=M spacing=D" starts a round probing from M;
// "probe ip=A at=T" sends a probe for A at T (a duration since the round began); "hear at=T"
// judges the frame its input describes, heard at T, and prints the addresses it counts for;
// "heard" prints what the round heard.
//
// A frame is one line: "arp OP from=MAC sender=IP target=MAC target-ip=IP [dst=MAC]" (OP is
// request or reply; dst defaults to the target MAC) or "na from=MAC target=IP [dst=IP]
// [solicited] [hop=N] [no-lla]" (dst defaults to ff02::1, the hop limit to 255).
func TestAnswers(t *testing.T) {
	var round *answerRound
	var start time.Time
	at := func(d *datadriven.TestData) time.Time {
		var s string
		d.ScanArgs(t, "at", &s)
		dur, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return start.Add(dur)
	}
	datadriven.RunTest(t, "testdata/answers.txt", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "round":
			var family, mac, spacing string
			d.ScanArgs(t, "family", &family)
			d.ScanArgs(t, "mac", &mac)
			d.ScanArgs(t, "spacing", &spacing)
			sp, err := time.ParseDuration(spacing)
			if err != nil {
				t.Fatal(err)
			}
			answer := ARPAnswer
			if family == "ndp" {
				answer = NDPAnswer
			}
			start = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
			round = newAnswerRound(mustMAC(t, mac), sp, answer)
			return ""
		case "probe":
			var ip string
			d.ScanArgs(t, "ip", &ip)
			round.probed(netip.MustParseAddr(ip), at(d))
			return ""
		case "hear":
			got := round.hear(describedFrame(t, strings.TrimSpace(d.Input)), at(d))
			if len(got) == 0 {
				return "ignored\n"
			}
			var b strings.Builder
			for _, ip := range got {
				fmt.Fprintf(&b, "counts for %s\n", ip)
			}
			return b.String()
		case "heard":
			var b strings.Builder
			ips := make([]netip.Addr, 0, len(round.heard))
			for ip := range round.heard {
				ips = append(ips, ip)
			}
			slices.SortFunc(ips, netip.Addr.Compare)
			for _, ip := range ips {
				macs := slices.Clone(round.heard[ip])
				slices.Sort(macs)
				fmt.Fprintf(&b, "%s: %s\n", ip, strings.Join(slices.Compact(macs), " "))
			}
			if len(ips) == 0 {
				return "nothing\n"
			}
			return b.String()
		}
		t.Fatalf("unknown command %q", d.Cmd)
		return ""
	})
}

func mustMAC(t testing.TB, s string) net.HardwareAddr {
	t.Helper()
	mac, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return mac
}

// describedFrame builds the frame a transcript line describes (see TestAnswers).
func describedFrame(t *testing.T, line string) []byte {
	t.Helper()
	words := strings.Fields(line)
	args := map[string]string{}
	flags := map[string]bool{}
	for _, w := range words[1:] {
		if k, v, ok := strings.Cut(w, "="); ok {
			args[k] = v
		} else {
			flags[w] = true
		}
	}
	from := mustMAC(t, args["from"])
	switch words[0] {
	case "arp":
		op := arp.OperationReply
		if flags["request"] {
			op = arp.OperationRequest
		}
		target := mustMAC(t, args["target"])
		dst := target
		if s, ok := args["dst"]; ok {
			dst = mustMAC(t, s)
		}
		return arpFrame(t, op, dst, from, netip.MustParseAddr(args["sender"]), target, netip.MustParseAddr(args["target-ip"]))
	case "na":
		dst := allNodes
		if s, ok := args["dst"]; ok {
			dst = netip.MustParseAddr(s)
		}
		hop := byte(255)
		if s, ok := args["hop"]; ok {
			var n int
			fmt.Sscan(s, &n)
			hop = byte(n)
		}
		na := advertisement(netip.MustParseAddr(args["target"]), from, flags["solicited"])
		if flags["no-lla"] {
			na.Options = nil
		}
		return naFrameTo(t, from, netip.MustParseAddr("fe80::99"), dst, na, hop)
	}
	t.Fatalf("unknown frame %q", line)
	return nil
}

// naFrameTo wraps an ICMPv6 message from src (MAC srcMAC, address srcIP) to dst in IPv6 and
// Ethernet.
func naFrameTo(t testing.TB, srcMAC net.HardwareAddr, srcIP, dst netip.Addr, m ndp.Message, hopLimit byte) []byte {
	body, err := ndp.MarshalMessageChecksum(m, srcIP, dst)
	if err != nil {
		t.Fatal(err)
	}
	d := dst.As16()
	eth := net.HardwareAddr{0x33, 0x33, d[12], d[13], d[14], d[15]}
	hdr := make([]byte, ipv6HeaderLen)
	hdr[0] = 6 << 4
	binary.BigEndian.PutUint16(hdr[4:6], uint16(len(body)))
	hdr[6], hdr[7] = protoICMPv6, hopLimit
	s := srcIP.As16()
	copy(hdr[8:24], s[:])
	copy(hdr[24:40], d[:])
	f := ethernet.Frame{Destination: eth, Source: srcMAC, EtherType: etherTypeIPv6, Payload: append(hdr, body...)}
	b, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

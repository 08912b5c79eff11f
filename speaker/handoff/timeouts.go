package handoff

import (
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// ClosingTimeout is how long the entry of a flow this node picked up outlives the flow's close
// (FIN_WAIT, CLOSE_WAIT, LAST_ACK, TIME_WAIT, CLOSE). Such an entry sees only the client's side,
// so conntrack never sees the close end and keeps it for the node's timeout of the state it
// stopped in: an hour in CLOSE_WAIT where kube-proxy sets it (seen on the kubelet cluster: about
// 80 marked entries per node after a few moves). Meanwhile a new connection from the same client
// port (a busy client runs through its ports in a minute or less) met it: its SYN does not reopen
// such an entry, so it took the old flow's null translation and mark, and went to the node the
// old flow was handed to, or out of the node untranslated (ICMP host unreachable), or back and
// forth between two nodes that had each handed it off (seen: SYNs never answered, 1 s timeouts
// in a row). Ten seconds carries a close's last segments on to the node that holds the flow.
const ClosingTimeout = 10 * time.Second

// pickedUpTimeouts is the conntrack timeout policy of the flows this node picks up, one per
// family (`ct timeout picked-up4 { protocol tcp; l3proto ip; policy = ... }`): the node's own
// timeouts for every TCP state, ClosingTimeout for the closing ones.
func pickedUpTimeouts(table *nftables.Table, v4 bool) *nftables.NamedObj {
	l3 := uint16(unix.NFPROTO_IPV6)
	if v4 {
		l3 = unix.NFPROTO_IPV4
	}
	// Every state is given: google/nftables fills the missing ones from a package map that
	// it also writes the given ones into.
	policy := expr.CtStatePolicyTimeout{}
	for state, t := range tcpTimeouts {
		policy[state] = nodeTimeout(t.sysctl, t.kernel)
	}
	for _, state := range []uint16{expr.CtStateTCPFINWAIT, expr.CtStateTCPCLOSEWAIT, expr.CtStateTCPLASTACK, expr.CtStateTCPTIMEWAIT, expr.CtStateTCPCLOSE} {
		policy[state] = uint32(ClosingTimeout / time.Second)
	}
	return &nftables.NamedObj{Table: table, Name: timeoutName(v4), Type: nftables.ObjTypeCtTimeout,
		Obj: &expr.CtTimeout{L3Proto: l3, L4Proto: unix.IPPROTO_TCP, Policy: policy}}
}

// setPickedUpTimeouts is `ct timeout set "picked-up4"` (6 for IPv6): on a flow's first packet
// here, before its entry is confirmed.
func setPickedUpTimeouts(v4 bool) expr.Any {
	return &expr.Objref{Type: int(nftables.ObjTypeCtTimeout), Name: timeoutName(v4)}
}

func timeoutName(v4 bool) string {
	if v4 {
		return "picked-up4"
	}
	return "picked-up6"
}

// tcpTimeouts are, by conntrack state, the node's TCP timeout sysctls
// (net.netfilter.nf_conntrack_tcp_timeout_*) and the kernel's defaults; SYN_SENT2 has no
// sysctl of its own and takes SYN_SENT's.
var tcpTimeouts = map[uint16]struct {
	sysctl string
	kernel uint32
}{
	expr.CtStateTCPSYNSENT: {"syn_sent", 120}, expr.CtStateTCPSYNRECV: {"syn_recv", 60},
	expr.CtStateTCPESTABLISHED: {"established", 432000}, expr.CtStateTCPFINWAIT: {"fin_wait", 120},
	expr.CtStateTCPCLOSEWAIT: {"close_wait", 60}, expr.CtStateTCPLASTACK: {"last_ack", 30},
	expr.CtStateTCPTIMEWAIT: {"time_wait", 120}, expr.CtStateTCPCLOSE: {"close", 10},
	expr.CtStateTCPSYNSENT2: {"syn_sent", 120}, expr.CtStateTCPRETRANS: {"max_retrans", 300},
	expr.CtStateTCPUNACK: {"unacknowledged", 300},
}

// nodeTimeout reads one of the node's conntrack TCP timeouts in seconds, or returns def.
func nodeTimeout(name string, def uint32) uint32 {
	b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_" + name)
	if err != nil {
		return def
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return def
	}
	return uint32(v)
}

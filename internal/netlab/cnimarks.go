package netlab

// CNIMark is how a CNI (or a mesh) uses the packet and connection marks on a node, applied as
// it applies them: Set runs in a node's namespace (its pods are behind cni0), Unset undoes it.
type CNIMark struct {
	Name       string
	Set, Unset string // shell
}

// The CNIs' marks. Calico's Felix (iptables dataplane, default mark mask 0xffff0000) marks
// every packet from a workload interface 0x40000 in raw PREROUTING and sets its accept mark
// 0x10000 in its filter chains, an endpoint mark in 0xfff00000 in mangle. Cilium's eBPF
// programs write the whole mark of a pod's packets (its identity in the upper 16 bits, the
// magic 0x0f00 below; an nftables rule stands in for the BPF program here), and its ip rule
// sends the proxy's 0x200/0xf00 to table 2004. Istio's ambient mode marks in 0xfff and keeps the
// mark in the connection's (CONNMARK). kube-proxy's own masquerade mark 0x4000 is the real
// kube-proxy's, in every case.
var CNIMarks = []CNIMark{
	{Name: "calico", Set: `
iptables -t raw -N cali-PREROUTING
iptables -t raw -A cali-PREROUTING -j MARK --set-xmark 0x0/0xf0000
iptables -t raw -A cali-PREROUTING -i cni0 -j MARK --set-xmark 0x40000/0x40000
iptables -t raw -I PREROUTING -j cali-PREROUTING
iptables -t mangle -N cali-PREROUTING
iptables -t mangle -A cali-PREROUTING -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
iptables -t mangle -A cali-PREROUTING -i cni0 -j MARK --set-xmark 0x100000/0xfff00000
iptables -t mangle -A cali-PREROUTING -m mark --mark 0x10000/0x10000 -j ACCEPT
iptables -t mangle -I PREROUTING -j cali-PREROUTING
iptables -t filter -N cali-FORWARD
iptables -t filter -A cali-FORWARD -j MARK --set-xmark 0x0/0xe0000
iptables -t filter -A cali-FORWARD -i cni0 -j MARK --set-xmark 0x10000/0x10000
iptables -t filter -A cali-FORWARD -o cni0 -j MARK --set-xmark 0x10000/0x10000
iptables -t filter -A cali-FORWARD -m mark --mark 0x10000/0x10000 -j ACCEPT
iptables -t filter -I FORWARD -j cali-FORWARD`, Unset: `
iptables -t raw -D PREROUTING -j cali-PREROUTING; iptables -t raw -F cali-PREROUTING; iptables -t raw -X cali-PREROUTING
iptables -t mangle -D PREROUTING -j cali-PREROUTING; iptables -t mangle -F cali-PREROUTING; iptables -t mangle -X cali-PREROUTING
iptables -t filter -D FORWARD -j cali-FORWARD; iptables -t filter -F cali-FORWARD; iptables -t filter -X cali-FORWARD`},
	{Name: "cilium", Set: `
nft add table ip cilium-bpf-standin
nft 'add chain ip cilium-bpf-standin from-container { type filter hook prerouting priority raw; }'
nft add rule ip cilium-bpf-standin from-container iifname cni0 meta mark set 0x0a5b0f00
iptables -t mangle -N CILIUM_PRE_mangle
iptables -t mangle -A CILIUM_PRE_mangle -m mark --mark 0xa00/0xe00 -j ACCEPT
iptables -t mangle -I PREROUTING -j CILIUM_PRE_mangle
ip rule add fwmark 0x200/0xf00 lookup 2004 pref 9`, Unset: `
nft delete table ip cilium-bpf-standin
iptables -t mangle -D PREROUTING -j CILIUM_PRE_mangle; iptables -t mangle -F CILIUM_PRE_mangle; iptables -t mangle -X CILIUM_PRE_mangle
ip rule del fwmark 0x200/0xf00 lookup 2004 pref 9`},
	{Name: "istio", Set: `
iptables -t mangle -N ISTIO_PRERT
iptables -t mangle -A ISTIO_PRERT -i cni0 -j MARK --set-xmark 0x539/0xfff
iptables -t mangle -A ISTIO_PRERT -m mark --mark 0x539/0xfff -j CONNMARK --set-xmark 0x111/0xfff
iptables -t mangle -A ISTIO_PRERT -m connmark --mark 0x111/0xfff -j MARK --set-xmark 0x220/0x220
iptables -t mangle -A ISTIO_PRERT -m mark --mark 0x100/0x100 -j ACCEPT
iptables -t mangle -I PREROUTING -j ISTIO_PRERT`, Unset: `
iptables -t mangle -D PREROUTING -j ISTIO_PRERT; iptables -t mangle -F ISTIO_PRERT; iptables -t mangle -X ISTIO_PRERT`},
}

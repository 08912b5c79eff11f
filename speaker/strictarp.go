package speaker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/l2"
)

// ipvsDevice is the dummy device kube-proxy's IPVS mode puts every Service address on.
const ipvsDevice = "kube-ipvs0"

// strictARPCondition is the Speaker's StrictARP condition, nil when the node has no
// kube-ipvs0. With one, the kernel answers ARP for every Service address from every node
// unless net.ipv4.conf.all.arp_ignore (of this network namespace, under procSys) is 1 or 2
// (1 is what kube-proxy's strictARP sets) or 8; clients then flap between nodes. IPv6 is not
// affected: the kernel answers neighbour solicitations only for the receiving link's addresses.
func strictARPCondition(links []l2.Verdict, procSys string) *metav1.Condition {
	if !slices.ContainsFunc(links, func(v l2.Verdict) bool { return v.Name == ipvsDevice }) {
		return nil
	}
	c := &metav1.Condition{Type: v1alpha1.ConditionStrictARP}
	raw, err := os.ReadFile(filepath.Join(procSys, "net/ipv4/conf/all/arp_ignore"))
	ignore, perr := strconv.Atoi(strings.TrimSpace(string(raw)))
	switch {
	case err != nil || perr != nil:
		c.Status, c.Reason = metav1.ConditionUnknown, v1alpha1.ReasonArpIgnoreUnreadable
		c.Message = fmt.Sprintf("%s exists (kube-proxy in IPVS mode) but net.ipv4.conf.all.arp_ignore cannot be read: %v", ipvsDevice, errors.Join(err, perr))
	case ignore == 1 || ignore == 2 || ignore == 8: // 8 answers for no local address at all
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonArpIgnoreSet
		c.Message = fmt.Sprintf("%s holds the Service addresses and net.ipv4.conf.all.arp_ignore is %d: the kernel does not answer ARP for them, only the elected node's speaker does", ipvsDevice, ignore)
	default:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonIPVSWithoutStrictARP
		c.Message = fmt.Sprintf("kube-proxy runs in IPVS mode without strictARP: %s holds every Service address and net.ipv4.conf.all.arp_ignore is %d, "+
			"so this node answers ARP for every LoadBalancer address, not only those it is elected for; set ipvs.strictARP: true in kube-proxy's "+
			"configuration (kubectl -n kube-system edit configmap kube-proxy, then restart kube-proxy), or arp_ignore=1 and arp_announce=2 on the node", ipvsDevice, ignore)
	}
	return c
}

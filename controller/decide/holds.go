package decide

import (
	"net/netip"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
)

// Holds: a pool with spec.addressHold keeps the addresses a deleted Service let go for it
// (allocator.Hold). The book makes them when a Service is gone (release), ends them when their
// time is up (ExpireHolds), and the pool's status lists them (HoldEntries), which is where a
// restarted controller reads them back (RestoreHolds): only the controller writes it, and it
// is stored with the pool whose addresses it keeps.

// RestoreHolds reads back the holds the pools' status lists, after the Services' addresses
// (Rebuild): a Service's stored status wins over a hold. It returns those that no longer stand
// (the pool no longer holds or contains the address, a Service holds it), which the next status
// write of the pool drops.
func (b *Book) RestoreHolds(pools []porticov1.IPAddressPool) (dropped []allocator.Hold) {
	for i := range pools {
		for _, e := range pools[i].Status.Holds {
			x := allocator.Hold{Service: e.Namespace + "/" + e.Name, SharingKey: e.SharingKey, Pool: pools[i].Name, Until: e.Until.Time}
			ip, err := netip.ParseAddr(e.Address)
			x.IP = ip
			if err != nil || !b.alloc.RestoreHold(x) {
				dropped = append(dropped, x)
			}
		}
	}
	return dropped
}

// ExpireHolds ends the holds whose time is up at now, and returns the pools whose addresses
// came free.
func (b *Book) ExpireHolds(now time.Time) (pools []string) {
	for _, x := range b.alloc.Expire(now) {
		pools = append(pools, b.alloc.PoolsContaining(x.IP)...)
	}
	return pools
}

// NextExpiry is when the soonest hold ends; zero when there is none.
func (b *Book) NextExpiry() time.Time { return b.alloc.NextExpiry() }

// HoldEntries are a pool's holds as its status lists them.
func HoldEntries(hs []allocator.Hold) []porticov1.AddressHoldEntry {
	var out []porticov1.AddressHoldEntry
	for _, x := range hs {
		ns, name, _ := strings.Cut(x.Service, "/")
		out = append(out, porticov1.AddressHoldEntry{Address: x.IP.String(), Namespace: ns, Name: name,
			SharingKey: x.SharingKey, Until: metav1.NewTime(x.Until)})
	}
	return out
}

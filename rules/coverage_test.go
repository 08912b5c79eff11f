package rules

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// TestPoolOfEachFamily: a dual-stack Service that took each family from another pool has
// allocated-from-pool "v4pool,v6pool"; each address's pool is the named one that holds it, even
// where an overlapping pool comes first by name (its advertisements are not the ones that apply).
func TestPoolOfEachFamily(t *testing.T) {
	pools, problems := ParsePools([]v1alpha1.IPAddressPool{
		{ObjectMeta: metav1.ObjectMeta{Name: "a-dual"}, Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{"198.51.100.0/24", "2001:db8::/64"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "v4pool"}, Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{"198.51.100.0/25"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "v6pool"}, Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{"2001:db8::/120"}}},
	})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationAllocatedFromPool: "v4pool,v6pool"}}}
	for ip, want := range map[string]string{"198.51.100.7": "v4pool", "2001:db8::7": "v6pool", "198.51.100.200": "a-dual"} {
		got := "none"
		if p, ok := PoolOf(svc, netip.MustParseAddr(ip), pools); ok {
			got = p.Name
		}
		if got != want {
			t.Errorf("%s: pool %s, want %s", ip, got, want)
		}
	}
}

package decide

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
)

// TestHoldEndsAsStored: a hold's end is what the pool's status stores (whole seconds), whatever
// the time the Service was seen gone and the pool's duration. Otherwise the status the pool
// reconciler computes never equals the one stored, and it rewrites it every second.
func TestHoldEndsAsStored(t *testing.T) {
	pool := porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "lab"}, Spec: porticov1.IPAddressPoolSpec{
		Addresses:   []porticov1.AddressRange{"198.51.100.10/32"},
		AddressHold: &porticov1.AddressHold{Duration: metav1.Duration{Duration: 1500 * time.Millisecond}}}}
	b := NewBook()
	b.SetPools([]porticov1.IPAddressPool{pool})
	b.alloc.Allocate(allocator.Request{Service: "web/www"})
	gone := time.Date(2026, 12, 3, 13, 40, 7, 123456789, time.UTC)
	Service(b, Seen{Key: "web/www", Now: gone})

	want := HoldEntries(b.PoolFacts("lab").Holds)
	if len(want) != 1 || want[0].Address != netip.MustParseAddr("198.51.100.10").String() {
		t.Fatalf("holds %+v", want)
	}
	raw, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var stored []porticov1.AddressHoldEntry
	if err := json.Unmarshal(raw, &stored); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(want, stored) {
		t.Errorf("the status computed (%v) differs from what it stores (%v)", want[0].Until, stored[0].Until)
	}
}

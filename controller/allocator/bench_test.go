package allocator

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

// BenchmarkAllocate measures one release and one allocation (the freed address is the lowest
// free one, so it is reused) with n addresses already allocated, in an IPv4 /8 and an IPv6 /64
// pool. The goal is a cost that grows at most logarithmically with n and not with pool size.
func BenchmarkAllocate(b *testing.B) {
	for _, pool := range []struct {
		name   string
		prefix string
		family Family
	}{{"v4-slash8", "10.0.0.0/8", IPv4}, {"v6-slash64", "2001:db8::/64", IPv6}} {
		for _, n := range []int{1_000, 100_000, 1_000_000} {
			b.Run(fmt.Sprintf("%s/allocated=%d", pool.name, n), func(b *testing.B) {
				a := New()
				a.SetPools([]Pool{{Name: "p", Ranges: mustRanges(pool.prefix), AutoAssign: true}})
				req := func(i int) Request {
					return Request{Service: fmt.Sprintf("ns/s%d", i), Families: []Family{pool.family}}
				}
				for i := range n {
					if _, err := a.Allocate(req(i)); err != nil {
						b.Fatal(err)
					}
				}
				rng := rand.New(rand.NewPCG(1, 2))
				b.ResetTimer()
				for range b.N {
					i := rng.IntN(n)
					a.Release(req(i).Service)
					if _, err := a.Allocate(req(i)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkIsFree measures the "is this address free or shareable" check.
func BenchmarkIsFree(b *testing.B) {
	a := New()
	a.SetPools([]Pool{{Name: "p", Ranges: mustRanges("10.0.0.0/8"), AutoAssign: true}})
	for i := range 100_000 {
		a.Allocate(Request{Service: fmt.Sprintf("ns/s%d", i)})
	}
	req := Request{Service: "ns/probe"}
	ip := netip.MustParseAddr("10.0.200.1")
	b.ResetTimer()
	for range b.N {
		_ = a.usable(ip, &req)
	}
}

// BenchmarkHoldAndReclaim measures a deleted Service's release with its hold, and its
// re-creation taking the address back, with n addresses allocated and 1 000 other holds
// standing: the goal is the cost of BenchmarkAllocate, whatever the number of holds.
func BenchmarkHoldAndReclaim(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("allocated=%d", n), func(b *testing.B) {
			a := New()
			a.SetPools([]Pool{{Name: "p", Ranges: mustRanges("10.0.0.0/8"), AutoAssign: true, HoldFor: time.Hour}})
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			svc := func(i int) string { return fmt.Sprintf("ns/s%d", i) }
			for i := range n + 1_000 {
				if _, err := a.Allocate(Request{Service: svc(i)}); err != nil {
					b.Fatal(err)
				}
			}
			for i := n; i < n+1_000; i++ {
				a.HoldReleased(svc(i), now, 10_000)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			b.ResetTimer()
			for range b.N {
				i := rng.IntN(n)
				a.HoldReleased(svc(i), now, 10_000)
				if _, err := a.Allocate(Request{Service: svc(i)}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

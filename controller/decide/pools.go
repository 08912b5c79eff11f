package decide

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
)

// PoolFacts is what the book knows of one pool.
type PoolFacts struct {
	Stats   allocator.Stats
	Waiting int32
	Orphans []string
	Next    []netip.Addr
	// InUse is the pool's addresses foreign hosts answer for: the caller fills it from the
	// Speakers' findings.
	InUse []porticov1.AddressInUse
	// Holds are the addresses the pool keeps for deleted Services, soonest to end first.
	Holds []allocator.Hold
}

// nextPerFamily is how many of each family's next addresses a pool's status lists.
const nextPerFamily = 4

// PoolFacts is what the book knows of the named pool.
func (b *Book) PoolFacts(pool string) PoolFacts {
	f := PoolFacts{}
	f.Stats, _ = b.alloc.Stats(pool)
	for _, w := range b.waiting {
		if slices.Contains(w.pools, pool) {
			f.Waiting++
		}
	}
	for svc, p := range b.orphanOf {
		if slices.Contains(strings.Split(p, ","), pool) {
			f.Orphans = append(f.Orphans, svc)
		}
	}
	slices.Sort(f.Orphans)
	f.Next = b.alloc.NextAddresses(pool, nextPerFamily)
	f.Holds = b.alloc.Holds(pool)
	return f
}

// ExhaustedCondition is the pool's Exhausted condition.
func ExhaustedCondition(f PoolFacts) metav1.Condition {
	c := metav1.Condition{Type: porticov1.ConditionExhausted}
	if f.Stats.Size[0] == nil {
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, "NoAddresses", "the pool has no valid address"
		return c
	}
	// The addresses a foreign host answers for count as available, but none is handed out.
	free := new(big.Int).Add(f.Stats.Available[0], f.Stats.Available[1])
	free.Sub(free, big.NewInt(f.Stats.InUse))
	foreign := ""
	if f.Stats.InUse > 0 {
		foreign = fmt.Sprintf("%d in use by foreign hosts answering from %s (status.inUse; %s)",
			f.Stats.InUse, allocator.NamedMACs(f.Stats.InUseMACs), allocator.DisableProbingHint)
	}
	if free.Sign() > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, "FreeAddresses"
		c.Message = fmt.Sprintf("%s addresses free", free)
		if foreign != "" {
			c.Message += "; " + foreign
		}
		return c
	}
	assigned, held := f.Stats.Assigned[0]+f.Stats.Assigned[1], f.Stats.Held[0]+f.Stats.Held[1]
	c.Status, c.Reason = metav1.ConditionTrue, porticov1.ReasonPoolExhausted
	switch {
	case foreign != "":
		c.Message = fmt.Sprintf("no usable address is free: %d assigned, %d held for deleted Services, %s; %d Services wait for one",
			assigned, held, foreign, f.Waiting)
	case held > 0:
		c.Message = fmt.Sprintf("all %d usable addresses are assigned or held: %d assigned, %d held for deleted Services (status.holds, until each ends); %d Services wait for one",
			assigned+held, assigned, held, f.Waiting)
	default:
		c.Message = fmt.Sprintf("all %d usable addresses are assigned; %d Services wait for one", assigned, f.Waiting)
	}
	return c
}

// OrphanCondition is the pool's OrphanedIPs condition.
func OrphanCondition(f PoolFacts) metav1.Condition {
	c := metav1.Condition{Type: porticov1.ConditionOrphanedIPs, Status: metav1.ConditionFalse, Reason: "None",
		Message: "every address given from this pool is still in it"}
	if len(f.Orphans) > 0 {
		shown := f.Orphans[:min(len(f.Orphans), 5)]
		c.Status, c.Reason = metav1.ConditionTrue, porticov1.ReasonOrphanedIP
		c.Message = fmt.Sprintf("%d Services hold addresses this pool no longer contains (kept until they let go): %s", len(f.Orphans), strings.Join(shown, ", "))
	}
	return c
}

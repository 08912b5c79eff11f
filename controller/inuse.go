package controller

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
)

// foreignFinding is one speaker's report of a foreign host answering for a pool address.
type foreignFinding struct {
	addr netip.Addr
	porticov1.AddressInUse
}

// foreignFindings folds every speaker's status.foreignAnswers into one finding per address:
// the earliest heard (then the lowest MAC, then node), sorted by address. An answer from a MAC
// that any speaker answers with is a speaker's, never a foreign host's, and is dropped; so is
// one whose address does not parse (the Speaker is written by each node, not trusted blindly).
func foreignFindings(speakers []porticov1.Speaker) []foreignFinding {
	ours := map[string]bool{}
	for i := range speakers {
		for _, mac := range speakers[i].Status.HardwareAddrs {
			ours[strings.ToLower(mac)] = true
		}
	}
	best := map[netip.Addr]foreignFinding{}
	for i := range speakers {
		for _, a := range speakers[i].Status.ForeignAnswers {
			ip, err := netip.ParseAddr(a.IP)
			if err != nil || ours[strings.ToLower(a.MAC)] {
				continue
			}
			f := foreignFinding{addr: ip, AddressInUse: porticov1.AddressInUse{Address: ip.String(), MAC: a.MAC, SeenBy: speakers[i].Name, Since: a.Since}}
			if old, ok := best[ip]; !ok || earlier(f, old) {
				best[ip] = f
			}
		}
	}
	out := make([]foreignFinding, 0, len(best))
	for _, f := range best {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b foreignFinding) int { return a.addr.Compare(b.addr) })
	return out
}

func earlier(a, b foreignFinding) bool {
	return cmp.Or(a.Since.Compare(b.Since.Time), cmp.Compare(a.MAC, b.MAC), cmp.Compare(a.SeenBy, b.SeenBy)) < 0
}

func findingAddrs(fs []foreignFinding) []netip.Addr {
	out := make([]netip.Addr, len(fs))
	for i, f := range fs {
		out[i] = f.addr
	}
	return out
}

// inUseCondition names the pool's addresses a foreign host answers for.
func inUseCondition(inUse []porticov1.AddressInUse) metav1.Condition {
	c := metav1.Condition{Type: porticov1.ConditionAddressesInUse, Status: metav1.ConditionFalse, Reason: porticov1.ReasonNoneInUse,
		Message: "no foreign host answers for the addresses probed"}
	if len(inUse) == 0 {
		return c
	}
	shown := make([]string, 0, 5)
	for _, u := range inUse[:min(len(inUse), 5)] {
		shown = append(shown, u.Address+" ("+u.MAC+")")
	}
	c.Status, c.Reason = metav1.ConditionTrue, porticov1.ReasonAddressInUse
	c.Message = fmt.Sprintf("in use by foreign hosts, not handed out while they answer (%d): %s", len(inUse), strings.Join(shown, ", "))
	return c
}

// newlyInUse lists the entries of now whose address was not in before: one Warning event each.
func newlyInUse(before, now []porticov1.AddressInUse) []porticov1.AddressInUse {
	var out []porticov1.AddressInUse
	for _, u := range now {
		if !slices.ContainsFunc(before, func(b porticov1.AddressInUse) bool { return b.Address == u.Address }) {
			out = append(out, u)
		}
	}
	return out
}

// foreignAnswersChanged lets through only the Speaker events that can change a pool's inUse:
// its foreign answers or its MACs (which tell a speaker's answer from a foreign one).
var foreignAnswersChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return hasForeignAnswers(e.Object) },
	DeleteFunc: func(e event.DeleteEvent) bool { return hasForeignAnswers(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*porticov1.Speaker)
		n, ok2 := e.ObjectNew.(*porticov1.Speaker)
		return !ok1 || !ok2 || !equality.Semantic.DeepEqual(o.Status.ForeignAnswers, n.Status.ForeignAnswers) ||
			!slices.Equal(o.Status.HardwareAddrs, n.Status.HardwareAddrs)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func hasForeignAnswers(o client.Object) bool {
	sp, ok := o.(*porticov1.Speaker)
	return !ok || len(sp.Status.ForeignAnswers) > 0
}

// everyPool maps a Speaker change to every pool: any pool may hold the addresses it names,
// and pools are few.
func everyPool(c client.Reader) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, _ client.Object) []reconcile.Request {
		var pools porticov1.IPAddressPoolList
		if err := c.List(ctx, &pools); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, len(pools.Items))
		for i := range pools.Items {
			reqs[i].Name = pools.Items[i].Name
		}
		return reqs
	}
}

// inUseIn picks the findings inside the named pool, at most MaxPoolAddressesInUse (the lowest).
func inUseIn(b *decide.Book, pool string, findings []foreignFinding) []porticov1.AddressInUse {
	var out []porticov1.AddressInUse
	for _, f := range findings {
		if len(out) < porticov1.MaxPoolAddressesInUse && slices.Contains(b.PoolsContaining(f.addr), pool) {
			out = append(out, f.AddressInUse)
		}
	}
	return out
}

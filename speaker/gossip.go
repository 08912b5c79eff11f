package speaker

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/gossipkey"
	"github.com/portico-lb/portico/speaker/kubeapi"
	"github.com/portico-lb/portico/speaker/membership"
)

// refusalMemory is how long a refused member stays in the Speaker status after its last
// refused message.
const refusalMemory = 5 * time.Minute

// gossipState is the speaker's part of the gossip group: which members it admits, and its keys.
type gossipState struct {
	synced     atomic.Bool // the cache has synced: Admit can check claims
	joining    atomic.Bool // a join is on its way
	refused    refusals
	keyProblem string // why the memberlist Secret's keys were not applied; "" when they were
}

// refusal is a member the group refused: the name it claimed and where from.
type refusal struct {
	addr   netip.Addr
	reason string
	last   time.Time
}

// refusals are the members refused recently, by claimed name.
type refusals struct {
	mu     sync.Mutex
	byName map[string]refusal
}

// Admit is membership's Config.Admit: a member may join under a node's name only from one of
// that Node's InternalIP addresses, so that a process elsewhere on the LAN (holding the gossip
// key, or with gossip in clear) cannot take part in owner election as a node it is not.
func (s *Speaker) Admit(name string, addr netip.Addr) error {
	if !s.gossip.synced.Load() {
		// Nodes are not known yet: refuse quietly; the first join after the sync admits them.
		return fmt.Errorf("speaker %s is starting", s.Node)
	}
	err := s.checkClaim(name, addr)
	s.gossip.refused.mu.Lock()
	defer s.gossip.refused.mu.Unlock()
	if s.gossip.refused.byName == nil {
		s.gossip.refused.byName = map[string]refusal{}
	}
	before, had := s.gossip.refused.byName[name]
	if err == nil {
		delete(s.gossip.refused.byName, name)
		return nil
	}
	s.Metrics.membersRefused.Inc()
	s.gossip.refused.byName[name] = refusal{addr: addr, reason: err.Error(), last: time.Now()}
	if !had || before.addr != addr || before.reason != err.Error() {
		s.Log.Info("refused a gossip member", "claimed", name, "from", addr, "reason", err.Error())
		s.trigger(causeStatus)
	}
	return err
}

func (s *Speaker) checkClaim(name string, addr netip.Addr) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var node corev1.Node
	if err := s.Cache.Get(ctx, types.NamespacedName{Name: name}, &node); apierrors.IsNotFound(err) {
		return fmt.Errorf("member claims to be node %s, which does not exist", name)
	} else if err != nil {
		return fmt.Errorf("member claims to be node %s, which cannot be read: %w", name, err)
	}
	ips := rules.InternalIPs(&node)
	if !slices.Contains(ips, addr) {
		return fmt.Errorf("member claims to be node %s from %s, which is not one of its InternalIP addresses %v", name, addr, ips)
	}
	return nil
}

// refusalProblems describes the members refused within refusalMemory, for the Speaker status,
// and forgets older ones.
func (s *Speaker) refusalProblems() []string {
	s.gossip.refused.mu.Lock()
	defer s.gossip.refused.mu.Unlock()
	var out []string
	for _, name := range slices.Sorted(maps.Keys(s.gossip.refused.byName)) {
		r := s.gossip.refused.byName[name]
		if time.Since(r.last) > refusalMemory {
			delete(s.gossip.refused.byName, name)
			continue
		}
		out = append(out, "gossip member refused: "+r.reason)
	}
	return out
}

// refusalsExpired reports whether a remembered refusal is older than refusalMemory.
func (s *Speaker) refusalsExpired() bool {
	s.gossip.refused.mu.Lock()
	defer s.gossip.refused.mu.Unlock()
	for _, r := range s.gossip.refused.byName {
		if time.Since(r.last) > refusalMemory {
			return true
		}
	}
	return false
}

// Fields of the memberlist Secret.
const (
	// primaryKeyField encrypts the gossip (and decrypts it).
	primaryKeyField = gossipkey.PrimaryField
	// acceptedKeysField holds more keys, separated by newlines, accepted when decrypting.
	acceptedKeysField = "acceptedkeys"
)

// MemberlistKeys reads the gossip keys from the memberlist Secret.
func MemberlistKeys(sec *corev1.Secret) (membership.Keys, error) {
	k := membership.Keys{Primary: sec.Data[primaryKeyField], Accepted: bytes.Fields(sec.Data[acceptedKeysField])}
	if len(k.Primary) == 0 {
		return k, fmt.Errorf("Secret %s/%s has no key %q", sec.Namespace, sec.Name, primaryKeyField)
	}
	if err := k.Validate(); err != nil {
		return k, fmt.Errorf("Secret %s/%s: %w", sec.Namespace, sec.Name, err)
	}
	return k, nil
}

// ReadMemberlistKeys reads the memberlist Secret from the apiserver.
func ReadMemberlistKeys(ctx context.Context, r *kubeapi.Client, ref types.NamespacedName) (membership.Keys, error) {
	var sec corev1.Secret
	if err := r.Get(ctx, ref, &sec); err != nil {
		return membership.Keys{}, fmt.Errorf("reading memberlist keys from Secret %s: %w", ref, err)
	}
	return MemberlistKeys(&sec)
}

// reloadKeys reads the memberlist Secret again and applies changed keys. A Secret that cannot
// be read or holds bad keys changes nothing: the keys in use stay, and the Speaker status
// says what is wrong until the Secret is fixed.
func (s *Speaker) reloadKeys(ctx context.Context) {
	k, err := ReadMemberlistKeys(ctx, s.Client, *s.KeySecret)
	if err == nil && !k.Same(s.Group.Keys()) {
		err = s.Group.SetKeys(k)
		if err == nil {
			s.Metrics.keyChanges.Inc()
			s.Log.Info("memberlist keys changed", "keys", k.Count())
		}
	}
	if err == nil {
		s.Metrics.keys.Set(float64(s.Group.Keys().Count()))
	}
	problem := ""
	if err != nil {
		problem = err.Error() + " (the keys in use stay)"
	}
	if problem != s.gossip.keyProblem {
		if problem != "" {
			s.Log.Info("memberlist keys not changed", "error", problem)
		}
		s.gossip.keyProblem = problem
		s.trigger(causeStatus)
	}
}

// Resumed is membership's Config.Resumed: a member heard again after a silence (a healed
// partition) whose address the kernel has not resolved gets it asked for at once, in the
// kernel's place. The kernel asks again only every retrans_time (a second by default), holding
// this node's heartbeats until then, and meanwhile the member that took this node's addresses
// over keeps answering for them beside it.
func (s *Speaker) Resumed(addr netip.Addr) {
	go func() {
		switch asked, err := s.Announce.SolicitNeighbour(addr); {
		case err != nil:
			s.Log.Info("could not ask for a member's link-layer address after its silence; the kernel asks again by itself",
				"address", addr, "error", err.Error())
		case asked:
			s.Log.Info("asked for a member's link-layer address after its silence: the kernel's entry was unresolved", "address", addr)
		}
	}()
}

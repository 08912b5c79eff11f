package speaker

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/kubeapi"
)

// secretRefresh is how long a password read from a Secret is used before it is read again.
// The speaker reads only the Secrets BGPPeers reference, one GET each, instead of watching
// every Secret in the cluster.
const secretRefresh = 30 * time.Second

// secretCache holds the BGPPeers' password Secrets as last read. The self-check and conflict
// probes read the world from their own goroutines, hence the lock.
type secretCache struct {
	mu     sync.Mutex
	byName map[types.NamespacedName]cachedSecret
}

type cachedSecret struct {
	secret *corev1.Secret // nil: could not be read
	at     time.Time
}

// forPeers returns the Secrets the peers reference, read fresh through client when older than
// secretRefresh. A Secret that cannot be read is left out (the plan reports it).
func (c *secretCache) forPeers(ctx context.Context, client *kubeapi.Client, log logr.Logger, peers []v1alpha1.BGPPeer) []corev1.Secret {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byName == nil {
		c.byName = map[types.NamespacedName]cachedSecret{}
	}
	var out []corev1.Secret
	seen := map[types.NamespacedName]bool{}
	for i := range peers {
		ref := peers[i].Spec.PasswordSecret
		if ref == nil {
			continue
		}
		key := types.NamespacedName{Namespace: string(ref.Namespace), Name: string(ref.Name)}
		if seen[key] {
			continue
		}
		seen[key] = true
		cs, ok := c.byName[key]
		if !ok || time.Since(cs.at) > secretRefresh {
			cs = cachedSecret{at: time.Now()}
			var sec corev1.Secret
			if err := client.Get(ctx, key, &sec); err == nil {
				cs.secret = &sec
			} else {
				log.Info("reading a BGP password Secret", "secret", key, "error", err.Error())
			}
			c.byName[key] = cs
		}
		if cs.secret != nil {
			out = append(out, *cs.secret)
		}
	}
	for key := range c.byName {
		if !seen[key] {
			delete(c.byName, key)
		}
	}
	return out
}

// held reports whether any BGPPeer's password Secret is in use (and so due a re-read).
func (c *secretCache) held() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byName) > 0
}

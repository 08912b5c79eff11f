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

// secretRefresh is how long a password or key read from a Secret is used before it is read
// again. The speaker reads only the Secrets BGPPeers and BFDProfiles reference, one GET each,
// instead of watching every Secret in the cluster.
const secretRefresh = 30 * time.Second

// secretCache holds the BGPPeers' password Secrets and the BFDProfiles' key Secrets as last read. The self-check and conflict
// probes read the world from their own goroutines, hence the lock.
type secretCache struct {
	mu     sync.Mutex
	byName map[types.NamespacedName]cachedSecret
}

type cachedSecret struct {
	secret *corev1.Secret // nil: could not be read
	at     time.Time
}

// secretRefs are the Secrets the peers' passwords and the BFD profiles' keys are in.
func secretRefs(peers []v1alpha1.BGPPeer, profiles []v1alpha1.BFDProfile) []v1alpha1.SecretKeyRef {
	var refs []v1alpha1.SecretKeyRef
	for i := range peers {
		if ref := peers[i].Spec.PasswordSecret; ref != nil {
			refs = append(refs, *ref)
		}
	}
	for i := range profiles {
		if a := profiles[i].Spec.Authentication; a != nil {
			refs = append(refs, a.SecretRef)
		}
	}
	return refs
}

// read returns the Secrets refs name, read fresh through client when older than
// secretRefresh. A Secret that cannot be read is left out (the plan reports it).
func (c *secretCache) read(ctx context.Context, client *kubeapi.Client, log logr.Logger, refs []v1alpha1.SecretKeyRef) []corev1.Secret {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byName == nil {
		c.byName = map[types.NamespacedName]cachedSecret{}
	}
	var out []corev1.Secret
	seen := map[types.NamespacedName]bool{}
	for _, ref := range refs {
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
				log.Info("reading a Secret a BGPPeer or BFDProfile names", "secret", key, "error", err.Error())
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

// held reports whether any referenced Secret is in use (and so due a re-read).
func (c *secretCache) held() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byName) > 0
}

package speaker

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// secretRefresh is how long a password read from a Secret is used before it is read again.
// The speaker reads only the Secrets BGPPeers reference, one GET each, instead of watching
// every Secret in the cluster.
const secretRefresh = 30 * time.Second

type cachedSecret struct {
	secret *corev1.Secret // nil: could not be read
	at     time.Time
}

// secretsFor returns the Secrets the peers reference, read fresh when older than
// secretRefresh. A Secret that cannot be read is left out (the plan reports it).
func (s *Speaker) secretsFor(ctx context.Context, peers []v1alpha1.BGPPeer) []corev1.Secret {
	s.secretsMu.Lock()
	defer s.secretsMu.Unlock()
	if s.secrets == nil {
		s.secrets = map[types.NamespacedName]cachedSecret{}
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
		c, ok := s.secrets[key]
		if !ok || time.Since(c.at) > secretRefresh {
			c = cachedSecret{at: time.Now()}
			var sec corev1.Secret
			if err := s.Client.Get(ctx, key, &sec); err == nil {
				c.secret = &sec
			} else {
				s.Log.Info("reading a BGP password Secret", "secret", key, "error", err.Error())
			}
			s.secrets[key] = c
		}
		if c.secret != nil {
			out = append(out, *c.secret)
		}
	}
	for key := range s.secrets {
		if !seen[key] {
			delete(s.secrets, key)
		}
	}
	return out
}

// holdsSecrets reports whether any BGPPeer's password Secret is in use (and so due a re-read).
func (s *Speaker) holdsSecrets() bool {
	s.secretsMu.Lock()
	defer s.secretsMu.Unlock()
	return len(s.secrets) > 0
}

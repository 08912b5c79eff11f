package gossipkey_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/speaker/gossipkey"
	"github.com/portico-lb/portico/speaker/kubeapi"
)

// TestEnsureCreatesOnce: speakers starting together, each with its own connection to a real
// apiserver, find no Secret and all try to create it: exactly one creates it, and every one
// comes back with that one's key. A second round (the speakers restarting) creates nothing and
// reads the same key; a Secret a user made is read and never replaced.
func TestEnsureCreatesOnce(t *testing.T) {
	cp := controlplane.StartFor(t, controlplane.Options{})
	ctx := context.Background()
	ref := types.NamespacedName{Namespace: "default", Name: "portico-memberlist"}
	const speakers = 8

	race := func() (keys [][]byte, created int) {
		clients := make([]*kubeapi.Client, speakers)
		for i := range clients {
			c, err := kubeapi.New(cp.Config)
			if err != nil {
				t.Fatal(err)
			}
			clients[i] = c
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, c := range clients {
			wg.Go(func() {
				<-start
				sec, made, err := gossipkey.Ensure(ctx, c, ref)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("Ensure: %v", err)
					return
				}
				keys = append(keys, sec.Data[gossipkey.PrimaryField])
				if made {
					created++
				}
			})
		}
		close(start)
		wg.Wait()
		return keys, created
	}
	sameKey := func(round string, keys [][]byte, want []byte) {
		t.Helper()
		for _, k := range keys {
			if !bytes.Equal(k, want) {
				t.Errorf("%s: a speaker got key %x, another %x", round, k, want)
			}
		}
	}

	keys, created := race()
	if created != 1 || len(keys) != speakers {
		t.Fatalf("first start: %d of %d speakers created the Secret, want exactly 1", created, len(keys))
	}
	if len(keys[0]) != gossipkey.KeyBytes {
		t.Errorf("created key is %d bytes, want %d", len(keys[0]), gossipkey.KeyBytes)
	}
	sameKey("first start", keys, keys[0])
	first := keys[0]

	keys, created = race()
	if created != 0 {
		t.Errorf("restart: %d speakers created the Secret again", created)
	}
	sameKey("restart", keys, first)

	// A user's own Secret, under another name, is read as it is.
	userRef := types.NamespacedName{Namespace: "default", Name: "users-key"}
	userKey := []byte("0123456789abcdef")
	admin, err := kubeapi.New(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: userRef.Namespace, Name: userRef.Name},
		Data: map[string][]byte{gossipkey.PrimaryField: userKey}}); err != nil {
		t.Fatal(err)
	}
	sec, made, err := gossipkey.Ensure(ctx, admin, userRef)
	if err != nil || made || !bytes.Equal(sec.Data[gossipkey.PrimaryField], userKey) {
		t.Errorf("a user's Secret: created %v, key %q, err %v; want it read unchanged", made, sec.Data[gossipkey.PrimaryField], err)
	}
}

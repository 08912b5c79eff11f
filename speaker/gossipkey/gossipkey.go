// Package gossipkey makes the Secret that holds the speakers' gossip key, once. The first
// speaker to find it missing creates it with a random key; every other speaker, and every later
// start, reads that one. Nothing here ever updates or replaces the Secret, so a key in use (one
// a user wrote, or one a speaker made) is never lost, and a manifest that does not carry the
// Secret can be applied again and again (helm template, GitOps) without splitting the group.
package gossipkey

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// PrimaryField is the Secret's field whose key encrypts the gossip (and decrypts it).
const PrimaryField = "secretkey"

// KeyBytes is the length of a created key: AES-256.
const KeyBytes = 32

// Client is what Ensure needs of the apiserver: read one object, create one.
type Client interface {
	Get(ctx context.Context, key types.NamespacedName, obj runtime.Object) error
	Create(ctx context.Context, obj runtime.Object) error
}

// Ensure returns the Secret ref, creating it with a random key when it does not exist.
// Speakers starting together race to create it: one wins, the others get AlreadyExists and
// read the winner's. created reports whether this call made it.
func Ensure(ctx context.Context, c Client, ref types.NamespacedName) (sec *corev1.Secret, created bool, err error) {
	sec = &corev1.Secret{}
	err = c.Get(ctx, ref, sec)
	if err == nil || !apierrors.IsNotFound(err) {
		return sec, false, err
	}
	key := make([]byte, KeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, false, err
	}
	sec = New(ref, key)
	switch err = c.Create(ctx, sec); {
	case err == nil:
		return sec, true, nil
	case apierrors.IsAlreadyExists(err):
		sec = &corev1.Secret{}
		return sec, false, c.Get(ctx, ref, sec)
	default:
		return nil, false, fmt.Errorf("creating the gossip key Secret %s: %w", ref, err)
	}
}

// New is the Secret Ensure creates: key under PrimaryField. It stays mutable: rotating the key
// is three edits of this Secret (docs/install.md).
func New(ref types.NamespacedName, key []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name,
			Labels: map[string]string{"app.kubernetes.io/name": "portico", "app.kubernetes.io/component": "speaker"}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{PrimaryField: key},
	}
}

package controller

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
)

// emptyCluster is a cache with nothing in it: enough to load the allocator, which this test
// needs only to take the lock.
type emptyCluster struct{}

func (emptyCluster) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return nil
}
func (emptyCluster) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// TestPanicReleasesTheLock: a reconciler that panics while it holds the allocator (recovered by
// controller-runtime) must not leave every later reconcile waiting for the lock.
func TestPanicReleasesTheLock(t *testing.T) {
	s := newState(emptyCluster{}, "portico.dev/portico")
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not reach the caller")
			}
		}()
		_ = s.withLock(context.Background(), nil, func(*decide.Book, []porticov1.IPAddressPool) { panic("a bug in a reconciler") })
	}()
	done := make(chan error, 1)
	go func() {
		done <- s.withLock(context.Background(), nil, func(*decide.Book, []porticov1.IPAddressPool) {})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lock is still held after the panic")
	}
}

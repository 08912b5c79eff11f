package controller

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// Queue takes the objects a reconciler is asked to reconcile again besides its watches: the
// Services to retry, the pools whose status to write, a failed write's object. The manager's
// controllers read them from a channel (chanQueue); the simulator queues them itself.
type Queue interface {
	// Add asks for key to be reconciled; it waits while the queue is full, unless ctx ends.
	Add(ctx context.Context, key types.NamespacedName)
}

// Queues are the Service, health and pool reconcilers' own queues.
type Queues struct {
	Services, Health, Pools Queue
}

// chanQueue is a Queue a controller reads as a channel source (ch); Add sends on send.
type chanQueue struct {
	ch   chan event.GenericEvent
	send chan<- event.GenericEvent
}

func newChanQueue(capacity int) chanQueue {
	ch := make(chan event.GenericEvent, capacity)
	return chanQueue{ch, ch}
}

func (q chanQueue) Add(ctx context.Context, key types.NamespacedName) {
	obj := &metav1.PartialObjectMetadata{}
	obj.Namespace, obj.Name = key.Namespace, key.Name
	select {
	case q.send <- event.GenericEvent{Object: obj}:
	case <-ctx.Done():
	}
}

// channel is the channel a controller reads q from (a Queue Setup made).
func channel(q Queue) chan event.GenericEvent { return q.(chanQueue).ch }

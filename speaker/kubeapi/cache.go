package kubeapi

import (
	"context"
	"reflect"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

// Cache keeps an informer per kind asked for: each lists, then watches, every object of its
// kind, passing it through the Cache's transform before storing it.
type Cache struct {
	client    *Client
	transform toolscache.TransformFunc

	mu        sync.Mutex
	ctx       context.Context // set by Start: informers asked for later start at once
	informers map[schema.GroupVersionKind]*informer
}

type informer struct {
	toolscache.SharedIndexInformer
	resource
}

// NewCache returns a Cache reading through c; transform may be nil.
func NewCache(c *Client, transform toolscache.TransformFunc) *Cache {
	return &Cache{client: c, transform: transform, informers: map[schema.GroupVersionKind]*informer{}}
}

// Start runs the informers asked for so far, and those asked for later, until ctx ends.
func (c *Cache) Start(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ctx = ctx
	for _, inf := range c.informers {
		go inf.RunWithContext(ctx)
	}
}

// informerFor returns the informer of obj's kind (obj: an object or a list), making it.
func (c *Cache) informerFor(obj runtime.Object) (*informer, error) {
	r, err := c.client.resourceOf(obj)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if inf := c.informers[r.gvk]; inf != nil {
		return inf, nil
	}
	example, err := c.client.scheme.New(r.gvk)
	if err != nil {
		return nil, err
	}
	listKind := r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List")
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list, err := c.client.scheme.New(listKind)
			if err != nil {
				return nil, err
			}
			return list, r.list(ctx, list, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return r.watch(ctx, opts)
		},
	}
	inf := &informer{toolscache.NewSharedIndexInformerWithOptions(lw, example,
		toolscache.SharedIndexInformerOptions{ObjectDescription: r.gvk.Kind}), r}
	if c.transform != nil {
		if err := inf.SetTransform(c.transform); err != nil {
			return nil, err
		}
	}
	c.informers[r.gvk] = inf
	if c.ctx != nil {
		go inf.RunWithContext(c.ctx)
	}
	return inf, nil
}

// AddEventHandler has h told of every change to obj's kind.
func (c *Cache) AddEventHandler(obj runtime.Object, h toolscache.ResourceEventHandler) error {
	inf, err := c.informerFor(obj)
	if err != nil {
		return err
	}
	_, err = inf.AddEventHandler(h)
	return err
}

// WaitForCacheSync waits until every informer has listed its kind once; false if ctx ended
// first.
func (c *Cache) WaitForCacheSync(ctx context.Context) bool {
	c.mu.Lock()
	var synced []toolscache.InformerSynced
	for _, inf := range c.informers {
		synced = append(synced, inf.HasSynced)
	}
	c.mu.Unlock()
	return toolscache.WaitForCacheSync(ctx.Done(), synced...)
}

// Get copies the cached object of obj's kind named key into obj; a NotFound error when the
// cache has none.
func (c *Cache) Get(_ context.Context, key types.NamespacedName, obj runtime.Object) error {
	inf, err := c.informerFor(obj)
	if err != nil {
		return err
	}
	item, ok, err := inf.GetStore().GetByKey(toolscache.NewObjectName(key.Namespace, key.Name).String())
	if err != nil {
		return err
	}
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Group: inf.gvk.Group, Resource: inf.plural}, key.Name)
	}
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(item.(runtime.Object).DeepCopyObject()).Elem())
	return nil
}

// List fills list with every cached object of its kind. The items are shallow copies that share
// their maps and slices with the cache: callers only read them (every Service's deep copy on
// every change would cost more than the plan).
func (c *Cache) List(_ context.Context, list runtime.Object) error {
	inf, err := c.informerFor(list)
	if err != nil {
		return err
	}
	items := inf.GetStore().List()
	objs := make([]runtime.Object, len(items))
	for i, item := range items {
		objs[i] = item.(runtime.Object)
	}
	return meta.SetList(list, objs)
}

package migrate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReadFiles reads objects from YAML or JSON files, several documents per file, lists (as
// `kubectl get -o yaml` prints them) expanded; "-" is standard input.
func ReadFiles(paths []string, stdin io.Reader) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, path := range paths {
		var b []byte
		var err error
		if path == "-" {
			b, err = io.ReadAll(stdin)
		} else {
			b, err = os.ReadFile(path)
		}
		if err != nil {
			return nil, err
		}
		got, err := decode(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		objs = append(objs, got...)
	}
	return objs, nil
}

func decode(b []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for n := 1; ; n++ {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.IsList() {
			err := u.EachListItem(func(o runtime.Object) error {
				objs = append(objs, o.(*unstructured.Unstructured))
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("document %d: %w", n, err)
			}
			continue
		}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("document %d has no apiVersion or kind", n)
		}
		objs = append(objs, u)
	}
}

// clusterKinds are MetalLB's kinds, newest version first where there are two.
var clusterKinds = [][]schema.GroupVersionKind{
	{{Group: Group, Version: "v1beta1", Kind: "IPAddressPool"}},
	{{Group: Group, Version: "v1beta1", Kind: "L2Advertisement"}},
	{{Group: Group, Version: "v1beta1", Kind: "BGPAdvertisement"}},
	{{Group: Group, Version: "v1beta1", Kind: "Community"}},
	{{Group: Group, Version: "v1beta2", Kind: "BGPPeer"}, {Group: Group, Version: "v1beta1", Kind: "BGPPeer"}},
	{{Group: Group, Version: "v1beta1", Kind: "BFDProfile"}},
}

// ReadCluster lists MetalLB's objects in namespace (all namespaces when empty). Kinds the
// cluster does not serve are skipped; none at all is an error.
func ReadCluster(ctx context.Context, c client.Reader, namespace string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	served := 0
	for _, versions := range clusterKinds {
		for _, gvk := range versions {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			err := c.List(ctx, list, client.InNamespace(namespace))
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("listing %s: %w", gvk.GroupKind(), err)
			}
			served++
			for i := range list.Items {
				objs = append(objs, &list.Items[i])
			}
			break
		}
	}
	if served == 0 {
		return nil, fmt.Errorf("the cluster serves no %s objects: is MetalLB installed? (or read its objects from files with -f)", Group)
	}
	return objs, nil
}

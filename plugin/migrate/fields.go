package migrate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// fields hands out the fields of one MetalLB object's spec and remembers which were taken, so
// whatever nobody took is reported instead of lost.
type fields struct {
	obj   *unstructured.Unstructured
	spec  map[string]any
	taken map[string]bool
	out   *Result
}

func newFields(obj *unstructured.Unstructured, out *Result) *fields {
	spec, _ := obj.Object["spec"].(map[string]any)
	return &fields{obj: obj, spec: spec, taken: map[string]bool{}, out: out}
}

// take decodes field key into v; false when absent or malformed (malformed is reported).
func (f *fields) take(key string, v any) bool {
	raw, ok := f.spec[key]
	f.taken[key] = true
	if !ok || raw == nil {
		return false
	}
	b, err := json.Marshal(raw)
	if err == nil {
		// A sub-field this translator does not know fails the whole field, loudly.
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err = dec.Decode(v)
	}
	if err != nil {
		f.skip(key, fmt.Sprintf("cannot be read: %v", err))
		return false
	}
	return true
}

// drop takes a field Portico has no equivalent for; it is reported unless it is empty or
// holds a harmless value (MetalLB's default: nothing is lost).
func (f *fields) drop(key, reason string, harmless ...any) {
	raw, ok := f.spec[key]
	f.taken[key] = true
	if l, isList := raw.([]any); !ok || raw == nil || (isList && len(l) == 0) ||
		slices.ContainsFunc(harmless, func(h any) bool { return reflect.DeepEqual(h, raw) }) {
		return
	}
	f.skip(key, reason)
}

func (f *fields) skip(key, reason string) {
	f.out.NotTranslated = append(f.out.NotTranslated, Problem{Object: describe(f.obj), Field: "spec." + key, Reason: reason})
}

// rest reports every field no translation took.
func (f *fields) rest() {
	var keys []string
	for k := range f.spec {
		if !f.taken[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		f.skip(k, "unknown to this translator (a newer MetalLB field?); not carried over")
	}
}

func describe(obj *unstructured.Unstructured) string {
	name := obj.GetName()
	if ns := obj.GetNamespace(); ns != "" {
		name = ns + "/" + name
	}
	return strings.TrimSpace(obj.GetKind() + " " + name + " (" + obj.GetAPIVersion() + ")")
}

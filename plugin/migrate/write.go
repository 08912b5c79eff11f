package migrate

import (
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// Write prints the result as YAML ready for `kubectl apply -f -`: what was not translated and
// the steps left to do come first, as comments, then one document per Portico object.
func Write(w io.Writer, r Result) error {
	var b strings.Builder
	b.WriteString("# Portico objects translated from MetalLB by `kubectl portico migrate`.\n")
	comment(&b, "NOT TRANSLATED", r.NotTranslated)
	comment(&b, "TO CHECK OR DO BY HAND", r.Notes)
	for _, o := range r.Objects {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return err
		}
		// Only what a user writes: no status, no server-set metadata.
		delete(m, "status")
		if meta, ok := m["metadata"].(map[string]any); ok {
			delete(meta, "creationTimestamp")
		}
		y, err := yaml.Marshal(m)
		if err != nil {
			return err
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func comment(b *strings.Builder, title string, ps []Problem) {
	if len(ps) == 0 {
		return
	}
	fmt.Fprintf(b, "#\n# %s (%d):\n", title, len(ps))
	for _, p := range ps {
		fmt.Fprintf(b, "#   - %s\n", p)
	}
}

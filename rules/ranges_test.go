package rules

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"sigs.k8s.io/yaml"
)

// TestParse runs testdata/parse.txt: each "pool" command lists one entry per line and prints
// the parsed ranges and the errors, as the pool's Ready condition would name them.
func TestParse(t *testing.T) {
	datadriven.RunTest(t, "testdata/parse.txt", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "pool":
			entries := strings.Split(strings.TrimSpace(d.Input), "\n")
			ranges, errs := ParsePool(entries)
			var b strings.Builder
			for _, r := range ranges {
				fmt.Fprintf(&b, "range %s (%s-%s)\n", r, r.First, r.Last)
			}
			for _, err := range errs {
				fmt.Fprintf(&b, "error %v\n", err)
			}
			return b.String()
		default:
			return "unknown command " + d.Cmd
		}
	})
}

// FuzzParseRange checks that whatever parses round-trips through String and is well formed.
func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"10.0.0.200-10.0.0.215", "10.0.0.0/24", "2001:db8::/64", "2001:db8::1-2001:db8::ff", "::ffff:1.2.3.4/128", "1.2.3.4 - 1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRange(s)
		if err != nil {
			return
		}
		if r.First.Is4() != r.Last.Is4() || r.Last.Less(r.First) || r.First.Zone() != "" || !r.First.IsGlobalUnicast() || !r.Last.IsGlobalUnicast() {
			t.Fatalf("%q parsed to malformed %v-%v", s, r.First, r.Last)
		}
		again, err := ParseRange(r.String())
		if err != nil || again != r {
			t.Fatalf("%q -> %s -> %v, %v", s, r, again, err)
		}
		if !r.Contains(r.First) || !r.Contains(r.Last) || r.Contains(netip.Addr{}) {
			t.Fatalf("%v does not contain its ends", r)
		}
	})
}

// TestSpecialReasonsMatchTheCRD: each reason SpecialBlocks gives is, word for word, the message
// of one of the CRD's CEL rules on a pool's addresses, and that rule names each of its blocks,
// so the apiserver and the controller refuse an address for the same stated reason.
func TestSpecialReasonsMatchTheCRD(t *testing.T) {
	raw, err := os.ReadFile("../config/crd/bases/portico.dev_ipaddresspools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd any
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	rules := map[string]string{} // message → rule
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if m, ok := v["message"].(string); ok {
				rules[m], _ = v["rule"].(string)
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(crd)
	for _, g := range SpecialBlocks {
		rule, ok := rules[g.Reason]
		if !ok {
			t.Errorf("no CEL rule in the CRD has the message %q", g.Reason)
			continue
		}
		for _, b := range g.Blocks {
			if !strings.Contains(rule, "'"+b.String()+"'") {
				t.Errorf("the CEL rule for %q does not name %s", g.Reason, b)
			}
		}
	}
}

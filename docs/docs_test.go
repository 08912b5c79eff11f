// Package docs_test keeps the documentation honest: router configurations parse with the real
// daemons, every metric in the code is in the reference, and relative links lead somewhere.
package docs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/portico-lb/portico/internal/netlab"
)

// fenced returns the bodies of the ```lang blocks of a Markdown file.
func fenced(t *testing.T, file, lang string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		blocks = append(blocks, m[1])
	}
	if len(blocks) == 0 {
		t.Fatalf("%s has no ```%s block", file, lang)
	}
	return blocks
}

// TestRouterConfigsParse: the BIRD and FRR examples in bgp-routers.md are accepted by bird2's
// and FRR's own parsers (the versions Debian 12 ships), with no warning.
func TestRouterConfigsParse(t *testing.T) {
	netlab.Require(t, "bird", "vtysh")
	for lang, check := range map[string][]string{"bird": {"bird", "-p", "-c"}, "frr": {"vtysh", "-C", "-f"}} {
		for i, conf := range fenced(t, "bgp-routers.md", lang) {
			path := filepath.Join(t.TempDir(), lang+".conf")
			if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(check[0], append(check[1:], path)...).CombinedOutput()
			if err != nil || len(strings.TrimSpace(string(out))) > 0 {
				t.Errorf("%s block %d: %s: %v\n%s", lang, i+1, strings.Join(check, " "), err, out)
			}
		}
	}
}

// TestMetricsDocumented: every portico_ metric the controller and the speaker register is in
// metrics.md.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`(?:Name:\s+|NewDesc\()"(portico_[a-z0-9_]+)"`)
	found := 0
	for _, dir := range []string{"../controller", "../speaker"} {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range name.FindAllStringSubmatch(string(src), -1) {
				found++
				if !strings.Contains(string(doc), "`"+m[1]+"`") {
					t.Errorf("%s registers %s, which docs/metrics.md does not describe", path, m[1])
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if found == 0 {
		t.Fatal("no portico_ metric found in the code: the pattern is out of date")
	}
}

// TestLinksResolve: every relative link in README.md and docs/*.md names an existing file.
func TestLinksResolve(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../README.md")
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", f, target)
			}
		}
	}
}

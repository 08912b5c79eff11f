// Package docs_test keeps the documentation honest: router configurations parse with the real
// daemons, every metric in the code is in the reference, relative links lead somewhere, and the
// files and tests a document names exist.
package docs_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path"
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

// TestLinksResolve: every relative link in the documents (documents) names an existing file.
func TestLinksResolve(t *testing.T) {
	files := documents(t)
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

// documents are the repository's Markdown files, README.md, BENCHMARKS.md and docs/ among them,
// as paths from this directory.
func documents(t *testing.T) []string {
	t.Helper()
	var files []string
	walkRepo(t, func(p string) {
		if strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
	})
	if len(files) < 3 {
		t.Fatalf("found %d Markdown files in the repository: the walk is out of date", len(files))
	}
	return files
}

// walkRepo calls f with the path of every file of the repository from this directory, leaving
// out what the build makes (bin/) and test data.
func walkRepo(t *testing.T, f func(path string)) {
	t.Helper()
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && p != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata"):
			return filepath.SkipDir
		case !d.IsDir():
			f(p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

var (
	// externalLink is a Markdown link to another site: what it names belongs to another project.
	externalLink = regexp.MustCompile(`\[[^\]]*\]\([a-z]+://[^)]*\)`)
	// goFile is a Go file as documents name it: by its path from the repository's root, from a
	// package (plan/step.go), or by its name alone; * stands for any part of a name.
	goFile = regexp.MustCompile(`[A-Za-z0-9_.*/-]*[A-Za-z0-9_*]\.go\b`)
	// goTest is a test, benchmark or fuzz target; a trailing * names every one it begins.
	goTest = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z0-9][A-Za-z0-9_]*\*?`)
	// testFunc is the declaration of one in a _test.go file.
	testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)
)

// TestNamesExist: every Go file and every test (Test…, Benchmark…, Fuzz…) a document names
// exists, so a reader who looks for it finds it. A file named by the end of its path (inbox.go,
// plan/step.go) is found when some file's path ends so.
func TestNamesExist(t *testing.T) {
	var goFiles []string
	tests := map[string]bool{}
	walkRepo(t, func(p string) {
		if !strings.HasSuffix(p, ".go") {
			return
		}
		goFiles = append(goFiles, filepath.ToSlash(strings.TrimPrefix(p, "../")))
		if !strings.HasSuffix(p, "_test.go") {
			return
		}
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(src), -1) {
			tests[m[1]] = true
		}
	})
	if len(tests) == 0 {
		t.Fatal("no test found in the repository: the walk is out of date")
	}
	for _, doc := range documents(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := externalLink.ReplaceAllString(string(b), "")
		for _, name := range unique(goFile.FindAllString(text, -1)) {
			if !fileExists(goFiles, strings.TrimPrefix(name, "./")) {
				t.Errorf("%s names %s, which is no file of the repository", strings.TrimPrefix(doc, "../"), name)
			}
		}
		for _, name := range unique(goTest.FindAllString(text, -1)) {
			if !testExists(tests, name) {
				t.Errorf("%s names %s, which no _test.go file declares", strings.TrimPrefix(doc, "../"), name)
			}
		}
	}
}

// fileExists says whether a file's path is name or ends in /name, * matching within a name.
func fileExists(files []string, name string) bool {
	depth := strings.Count(name, "/") + 1
	for _, f := range files {
		parts := strings.Split(f, "/")
		if len(parts) < depth {
			continue
		}
		if ok, _ := path.Match(name, strings.Join(parts[len(parts)-depth:], "/")); ok {
			return true
		}
	}
	return false
}

// testExists says whether tests has name, or, for name ending in *, one that begins so.
func testExists(tests map[string]bool, name string) bool {
	prefix, glob := strings.CutSuffix(name, "*")
	if !glob {
		return tests[name]
	}
	for test := range tests {
		if strings.HasPrefix(test, prefix) {
			return true
		}
	}
	return false
}

func unique(names []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

package ci

import (
	"bufio"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestEveryProgramHasItsPackage fails when a test or a make target runs a program that a fresh
// machine lacks after `apt-get install $(make -s lab-packages)`: one whose source is unknown
// (testdata/programs.txt), or whose Debian package is neither in LAB_PACKAGES nor on every
// Debian installation. Where dpkg can tell, it also checks the list against the packages that
// really hold the programs.
func TestEveryProgramHasItsPackage(t *testing.T) {
	root := filepath.Join("..", "..")
	lab := labPackages(t, filepath.Join(root, "Makefile"))
	known, base := readPrograms(t, filepath.Join("testdata", "programs.txt"))
	runs, err := goRuns(root)
	if err != nil {
		t.Fatal(err)
	}
	more, err := shellRuns(root)
	if err != nil {
		t.Fatal(err)
	}
	for program, s := range known {
		if s.via != "" {
			runs = append(runs, run{program, "run " + s.via})
		}
	}
	reported := map[string]bool{}
	for _, r := range append(runs, more...) {
		s, ok := known[r.program]
		switch {
		case reported[r.program]:
		case !ok:
			t.Errorf("%s runs %q, whose package testdata/programs.txt does not name: add it there, and its Debian package to LAB_PACKAGES", r.where, r.program)
		case s.kind == "deb" && !slices.Contains(lab, s.pkg) && !base[s.pkg]:
			t.Errorf("%s runs %q, from the Debian package %s, which LAB_PACKAGES lacks: a fresh machine does not have it", r.where, r.program, s.pkg)
		default:
			continue
		}
		reported[r.program] = true
	}
	checkWithDpkg(t, known, base)
}

type source struct{ kind, pkg, via string }

var makeList = regexp.MustCompile(`(?m)^LAB_PACKAGES\s*:?=\s*(.*)$`)

func labPackages(t *testing.T, makefile string) []string {
	data, err := os.ReadFile(makefile)
	if err != nil {
		t.Fatal(err)
	}
	m := makeList.FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s sets no LAB_PACKAGES", makefile)
	}
	return strings.Fields(string(m[1]))
}

func readPrograms(t *testing.T, path string) (map[string]source, map[string]bool) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	known, base := map[string]source{}, map[string]bool{}
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		fields := strings.Fields(lines.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if fields[0] == "base" {
			for _, p := range fields[1:] {
				base[p] = true
			}
			continue
		}
		s := source{kind: fields[1]}
		rest := fields[2:]
		if s.kind == "deb" && len(rest) > 0 {
			s.pkg, rest = rest[0], rest[1:]
		}
		if len(rest) > 0 && rest[0] == "via" {
			s.via = strings.Join(rest[1:], " ")
		}
		known[fields[0]] = s
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	return known, base
}

// checkWithDpkg asks dpkg which package holds each program found here, and whether each base
// package is on every installation. Off Debian it checks nothing; CI runs on Debian.
func checkWithDpkg(t *testing.T, known map[string]source, base map[string]bool) {
	Require(t, "", "dpkg", "dpkg-query")
	paths := map[string]string{} // program: where it is here
	for program, s := range known {
		switch {
		case s.kind != "deb":
		case strings.HasSuffix(program, "*"):
			paths[program] = strings.TrimSuffix(program, "*") + "zebra" // frr's daemons: one stands for all
		default:
			if p, err := exec.LookPath(program); err == nil {
				paths[program] = p
			} // else not installed here: the list is what a fresh machine gets
		}
	}
	owners := owners(slices.Collect(maps.Values(paths)))
	for program, path := range paths {
		if got := owners[path]; got != "" && got != known[program].pkg {
			t.Errorf("testdata/programs.txt says %s comes from %s; dpkg says %s", program, known[program].pkg, got)
		}
	}
	for p := range base {
		out, err := exec.Command("dpkg-query", "-W", "-f", "${Essential} ${Priority}", p).Output()
		if err != nil || (!strings.HasPrefix(string(out), "yes ") && !strings.HasSuffix(string(out), " required")) {
			t.Errorf("base package %s is not Essential or of Priority required (dpkg-query: %q, %v)", p, out, err)
		}
	}
}

// owners returns the package that holds each path, its links followed, as dpkg knows it
// (which, on a merged /usr, may record /bin/x for /usr/bin/x), in one call of dpkg.
func owners(paths []string) map[string]string {
	asked := map[string]string{} // what dpkg is asked: the path it stands for
	var args []string
	for _, path := range paths {
		real := path
		if r, err := filepath.EvalSymlinks(path); err == nil {
			real = r
		}
		for _, p := range []string{real, strings.TrimPrefix(real, "/usr")} {
			asked[p] = path
			args = append(args, p)
		}
	}
	out, _ := exec.Command("dpkg", append([]string{"-S"}, args...)...).Output() // fails when one is unknown
	found := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		pkg, p, ok := strings.Cut(line, ": ")
		if path, asks := asked[p]; ok && asks {
			found[path] = strings.SplitN(pkg, ":", 2)[0]
		}
	}
	return found
}

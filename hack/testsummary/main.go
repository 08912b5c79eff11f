// Command testsummary reads `go test -json` on its standard input and prints what plain
// `go test` prints (each package's ok or FAIL line, the output of failing tests, build
// errors), then which tests were skipped and why: without root or the lab tools the L2, BGP
// and data-plane suites skip, and plain `go test` says so only with -v. Lines that are not
// test events (go vet, a crashed build) pass through unchanged. `make test` runs it.
//
//	go test -json ./... 2>&1 | testsummary [-hint "how to run the skipped tests"]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	hint := flag.String("hint", "", "printed after the list of skipped tests")
	flag.Parse()
	if err := summarize(os.Stdin, os.Stdout, *hint); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output events
}

type testRun struct {
	name   string
	result string // pass, fail, skip; "" while running (or when the binary died)
	output []string
}

type packageRun struct {
	output []string // lines outside any test: the ok or FAIL line, TestMain's output, a panic
	tests  []*testRun
	byName map[string]*testRun
}

// skipped is one skipped test and its t.Skip message.
type skipped struct{ pkg, test, why string }

// summarize reads `go test -json` from in and writes to out what plain `go test` prints, then
// the skipped tests and hint.
func summarize(in io.Reader, out io.Writer, hint string) error {
	s := &summary{packages: map[string]*packageRun{}}
	lines := bufio.NewScanner(in)
	lines.Buffer(make([]byte, 1<<20), 64<<20)
	for lines.Scan() {
		var e event
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(out, lines.Text())
			continue
		}
		if e.Action == "build-output" {
			fmt.Fprint(out, e.Output)
			continue
		}
		if e.Package != "" {
			s.add(out, e)
		}
	}
	if err := lines.Err(); err != nil {
		return err
	}
	// A package with no end event: go test was killed. Show everything it said.
	for _, name := range s.order {
		if p := s.packages[name]; p != nil {
			p.print(out, "")
		}
	}
	printSkips(out, s.skips, hint)
	return nil
}

// summary is what summarize keeps while it reads.
type summary struct {
	packages map[string]*packageRun
	order    []string // packages not finished yet, in the order they started
	skips    []skipped
}

// add takes one event of a package or one of its tests; a finished package is printed.
func (s *summary) add(out io.Writer, e event) {
	p := s.packages[e.Package]
	if p == nil {
		p = &packageRun{byName: map[string]*testRun{}}
		s.packages[e.Package] = p
		s.order = append(s.order, e.Package)
	}
	if e.Test == "" {
		switch e.Action {
		case "output":
			p.output = append(p.output, e.Output)
		case "pass", "fail", "skip":
			p.print(out, e.Action)
			delete(s.packages, e.Package)
		}
		return
	}
	t := p.byName[e.Test]
	if t == nil {
		t = &testRun{name: e.Test}
		p.byName[e.Test] = t
		p.tests = append(p.tests, t)
	}
	switch e.Action {
	case "output":
		t.output = append(t.output, e.Output)
	case "pass", "fail", "skip":
		t.result = e.Action
		if e.Action == "skip" {
			s.skips = append(s.skips, skipped{e.Package, e.Test, t.skipReason()})
		}
	}
}

// print shows a finished package as plain `go test` does: only its ok line when it passed;
// when it failed, the output of its failed (or unfinished) tests, then its own lines.
func (p *packageRun) print(out io.Writer, result string) {
	if result == "pass" || result == "skip" {
		for _, line := range p.output {
			if strings.HasPrefix(line, "ok ") || strings.HasPrefix(line, "? ") {
				fmt.Fprint(out, line)
			}
		}
		return
	}
	for _, t := range p.tests {
		if t.result == "fail" || t.result == "" {
			t.print(out)
		}
	}
	for _, line := range p.output {
		fmt.Fprint(out, line)
	}
}

// print shows a failed test as plain `go test` does: its --- FAIL line, then what it logged,
// a subtest indented under its parent (-json drops that indentation).
func (t *testRun) print(out io.Writer) {
	indent := strings.Repeat("    ", strings.Count(t.name, "/"))
	var header, said []string
	for _, line := range t.output {
		switch {
		case strings.HasPrefix(line, "--- "):
			header = append(header, indent+line)
		case !strings.HasPrefix(line, "=== "):
			said = append(said, indent+line)
		}
	}
	for _, line := range append(header, said...) {
		fmt.Fprint(out, line)
	}
}

// skipReason is what the test said besides the framing lines: its t.Skip message.
func (t *testRun) skipReason() string {
	var said []string
	for _, line := range t.output {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "=== ") && !strings.HasPrefix(line, "--- SKIP") {
			said = append(said, line)
		}
	}
	if len(said) == 0 {
		return "(no reason given)"
	}
	return strings.Join(said, "; ")
}

func printSkips(out io.Writer, skips []skipped, hint string) {
	if len(skips) == 0 {
		return
	}
	fmt.Fprintf(out, "\nSKIPPED: %d tests did not run here (a skip is not a pass):\n", len(skips))
	for _, s := range skips {
		fmt.Fprintf(out, "  %s %s: %s\n", s.pkg, s.test, s.why)
	}
	if hint != "" {
		fmt.Fprintln(out, hint)
	}
}

// Command vulncheck runs govulncheck (pinned by this module) over a Go module against the Go
// vulnerability database at a pinned version, built offline from the module proxy (db.go), and
// fails when the module's code calls a vulnerable function that the accepted file does not
// name. `make vulncheck` runs it over Portico.
//
//	go run . [-cache DIR] [-accepted FILE] MODULE_DIR [PACKAGES...]
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout))
}

// run is the whole command; it returns the exit status: 0 clean, 1 an unaccepted call of a
// vulnerable function, 2 the check itself failed.
func run(args []string, out io.Writer) int {
	flags := flag.NewFlagSet("vulncheck", flag.ContinueOnError)
	cache := flags.String("cache", "../../bin/vulndb", "where the built database is kept")
	acceptedFile := flags.String("accepted", "accepted.txt", "findings accepted for now, one per line: ID module@version why")
	if err := flags.Parse(args); err != nil || flags.NArg() == 0 {
		fmt.Fprintln(out, "usage: vulncheck [-cache DIR] [-accepted FILE] MODULE_DIR [PACKAGES...]")
		return 2
	}
	patterns := flags.Args()[1:]
	if len(patterns) == 0 {
		patterns = []string{"./..."}
	}
	accepted, err := readAccepted(*acceptedFile)
	if err == nil {
		var db string
		if db, err = ensureDB(*cache); err == nil {
			var called []finding
			if called, err = scan(db, flags.Arg(0), patterns); err == nil {
				return report(out, called, accepted)
			}
		}
	}
	fmt.Fprintln(out, "vulncheck:", err)
	return 2
}

// finding is one vulnerable function reached from the scanned code, as govulncheck's JSON
// output gives it: trace[0] is the vulnerable function, the last frame the scanned code's call.
type finding struct {
	OSV          string `json:"osv"`
	FixedVersion string `json:"fixed_version"`
	Trace        []struct {
		Module   string `json:"module"`
		Version  string `json:"version"`
		Package  string `json:"package"`
		Function string `json:"function"`
		Receiver string `json:"receiver"`
		Position *struct {
			Filename string `json:"filename"`
			Line     int    `json:"line"`
		} `json:"position"`
	} `json:"trace"`
}

// key names the finding the way the accepted file does: ID module@version.
func (f finding) key() string {
	return f.OSV + " " + f.Trace[0].Module + "@" + f.Trace[0].Version
}

func (f finding) String() string {
	fixed := f.FixedVersion
	if fixed == "" {
		fixed = "no fixed version"
	}
	vuln, call := f.Trace[0], f.Trace[len(f.Trace)-1]
	where := call.Package
	if call.Position != nil {
		where = fmt.Sprintf("%s:%d", call.Position.Filename, call.Position.Line)
	}
	return fmt.Sprintf("%s (fixed in: %s): %s calls %s.%s", f.key(), fixed, where, vuln.Package, strings.TrimPrefix(vuln.Receiver+"."+vuln.Function, "."))
}

// scan runs govulncheck over patterns in dir and returns, per vulnerability and module, one
// call of a vulnerable function; imported but uncalled vulnerable code is not a finding.
func scan(db, dir string, patterns []string) ([]finding, error) {
	cmd := exec.Command("go", append([]string{"tool", "govulncheck", "-C", dir, "-db", "file://" + db, "-format", "json"}, patterns...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	byKey := map[string]finding{}
	dec := json.NewDecoder(stdout)
	for {
		var msg struct{ Finding *finding }
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, fmt.Errorf("reading govulncheck's output: %v\n%s", err, stderr.String())
		}
		f := msg.Finding
		if f == nil || len(f.Trace) == 0 || f.Trace[0].Function == "" {
			continue
		}
		// One call per vulnerability and module: the first by text, so runs print the same.
		if prev, ok := byKey[f.key()]; !ok || f.String() < prev.String() {
			byKey[f.key()] = *f
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("govulncheck: %v\n%s", err, stderr.String())
	}
	var called []finding
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		called = append(called, byKey[key])
	}
	return called, nil
}

// readAccepted reads the accepted findings: "ID module@version why", # comments. A finding
// is accepted for that version only, so an upgrade or a new toolchain re-opens the question.
func readAccepted(path string) (map[string]string, error) {
	accepted := map[string]string{}
	if path == "" {
		return accepted, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	for n := 1; lines.Scan(); n++ {
		fields := strings.Fields(lines.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if len(fields) < 3 {
			return nil, fmt.Errorf("%s:%d: want `ID module@version why`, got %q", path, n, lines.Text())
		}
		accepted[fields[0]+" "+fields[1]] = strings.Join(fields[2:], " ")
	}
	return accepted, lines.Err()
}

// report prints every finding, accepted ones with the reason, and returns the exit status.
func report(out io.Writer, called []finding, accepted map[string]string) int {
	failing := 0
	for _, f := range called {
		if why, ok := accepted[f.key()]; ok {
			fmt.Fprintf(out, "vulncheck: accepted %s; why: %s\n", f, why)
			continue
		}
		failing++
		fmt.Fprintf(out, "vulncheck: VULNERABLE %s\n", f)
	}
	fmt.Fprintf(out, "vulncheck: %d called vulnerabilities, %d accepted, %d failing (details: https://pkg.go.dev/vuln/ID)\n",
		len(called), len(called)-failing, failing)
	if failing > 0 {
		return 1
	}
	return 0
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFailsOnCalledVulnerability scans testdata/vulnerable, a module that calls
// golang.org/x/text/language.Parse at v0.3.6 (GO-2021-0113), against the database built from
// the pinned vulndb: the call is found and fails the check, until every finding is accepted
// for that version. (`make vulncheck` then runs the command itself over Portico.)
func TestFailsOnCalledVulnerability(t *testing.T) {
	db, err := ensureDB("../../bin/vulndb")
	if err != nil {
		t.Fatal(err)
	}
	called, err := scan(db, "testdata/vulnerable", []string{"./..."})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if status := report(&out, called, nil); status != 1 {
		t.Fatalf("exit status %d, want 1 (a called vulnerability):\n%s", status, out.String())
	}
	want := "VULNERABLE GO-2021-0113 golang.org/x/text@v0.3.6 (fixed in: v0.3.7): main.go:10 calls golang.org/x/text/language.Parse"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("output lacks %q:\n%s", want, out.String())
	}

	accepted := map[string]string{}
	for _, f := range called {
		accepted[f.key()] = "the test accepts it"
	}
	out.Reset()
	if status := report(&out, called, accepted); status != 0 || !strings.Contains(out.String(), "accepted GO-2021-0113 golang.org/x/text@v0.3.6") {
		t.Fatalf("exit status %d with every finding accepted, want 0 and the finding reported:\n%s", status, out.String())
	}
}

func TestAcceptedFileMustSayWhy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "accepted.txt")
	if err := os.WriteFile(path, []byte("GO-2021-0113 golang.org/x/text@v0.3.6\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readAccepted(path); err == nil || !strings.Contains(err.Error(), ":1:") {
		t.Fatalf("an entry without a reason read with error %v, want one naming line 1", err)
	}
}

func TestLatestFixed(t *testing.T) {
	r := func(events ...string) osvRange {
		var rg osvRange
		rg.Type = "SEMVER"
		for i, v := range events {
			if i%2 == 0 {
				rg.Events = append(rg.Events, osvEvent{Introduced: v})
			} else {
				rg.Events = append(rg.Events, osvEvent{Fixed: v})
			}
		}
		return rg
	}
	for _, tc := range []struct {
		name   string
		ranges []osvRange
		want   string
	}{
		{"fixed once", []osvRange{r("0", "1.2.0")}, "1.2.0"},
		{"two branches fixed", []osvRange{r("0", "1.2.5", "1.3.0", "1.3.1")}, "1.3.1"},
		{"reintroduced after the fix", []osvRange{r("0", "1.2.0", "1.4.0")}, ""},
		{"never fixed", []osvRange{r("0")}, ""},
		{"one range of two never fixed", []osvRange{r("0", "1.2.0"), r("0")}, ""},
		{"semver order, not string order", []osvRange{r("0", "1.9.0"), r("1.10.0", "1.10.2")}, "1.10.2"},
	} {
		if got := latestFixed(tc.ranges); got != tc.want {
			t.Errorf("%s: latestFixed = %q, want %q", tc.name, got, tc.want)
		}
	}
}

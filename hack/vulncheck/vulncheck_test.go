package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFailsOnCalledVulnerability runs the whole check over testdata/vulnerable, a module that
// calls golang.org/x/text/language.Parse at v0.3.6 (GO-2021-0113): the database built from
// the pinned vulndb knows it, the call is found, and the check fails until the finding is
// accepted for that version.
func TestFailsOnCalledVulnerability(t *testing.T) {
	var out strings.Builder
	if status := run([]string{"-accepted", "", "testdata/vulnerable"}, &out); status != 1 {
		t.Fatalf("exit status %d, want 1 (a called vulnerability):\n%s", status, out.String())
	}
	want := "VULNERABLE GO-2021-0113 golang.org/x/text@v0.3.6 (fixed in: v0.3.7): main.go:10 calls golang.org/x/text/language.Parse"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("output lacks %q:\n%s", want, out.String())
	}

	accepted := filepath.Join(t.TempDir(), "accepted.txt")
	var lines []string
	for _, line := range strings.Split(out.String(), "\n") {
		if key, ok := strings.CutPrefix(line, "vulncheck: VULNERABLE "); ok {
			id, rest, _ := strings.Cut(key, " ")
			module, _, _ := strings.Cut(rest, " ")
			lines = append(lines, id+" "+module+" the test accepts it")
		}
	}
	if err := os.WriteFile(accepted, []byte("# a comment\n"+strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if status := run([]string{"-accepted", accepted, "testdata/vulnerable"}, &out); status != 0 {
		t.Fatalf("exit status %d with every finding accepted, want 0:\n%s", status, out.String())
	}
	if !strings.Contains(out.String(), "accepted GO-2021-0113 golang.org/x/text@v0.3.6") {
		t.Fatalf("the accepted finding is not reported:\n%s", out.String())
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

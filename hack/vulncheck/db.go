package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// vulndbModule is the Go vulnerability database's source at a pinned commit. The module proxy
// serves it like any module, with its OSV entries in data/osv, so the check needs no network
// beyond the proxy; moving the pin is how the database is updated.
const vulndbModule = "golang.org/x/vulndb@v0.0.0-20261105234957-e22db6528018"

// ensureDB returns the directory, under cache, of the database built from vulndbModule in the
// layout `govulncheck -db file://DIR` reads, building it on first use.
func ensureDB(cache string) (string, error) {
	cache, err := filepath.Abs(cache) // a file:// URL needs an absolute path
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, strings.ReplaceAll(vulndbModule, "/", "_"))
	if _, err := os.Stat(filepath.Join(dir, "index", "db.json")); err == nil {
		return dir, nil
	}
	src, err := moduleDir(vulndbModule)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(cache, "building-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	_, version, _ := strings.Cut(vulndbModule, "@")
	published, err := module.PseudoVersionTime(version)
	if err != nil {
		return "", err
	}
	if err := writeDB(filepath.Join(src, "data", "osv"), tmp, published); err != nil {
		return "", fmt.Errorf("indexing %s: %w", vulndbModule, err)
	}
	return dir, os.Rename(tmp, dir)
}

// moduleDir downloads mod through the module proxy (checked against the checksum database)
// and returns its directory in the module cache.
func moduleDir(mod string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", mod)
	cmd.Dir = os.TempDir() // outside any module: nothing is added to a go.mod or go.sum
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); jerr != nil || m.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %v %s", mod, err, m.Error)
	}
	return m.Dir, nil
}

// osvEntry is the part of an OSV entry the indexes need.
type osvEntry struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Aliases  []string  `json:"aliases,omitempty"`
	Affected []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
		Ranges []osvRange `json:"ranges"`
	} `json:"affected"`
}

type osvRange struct {
	Type   string     `json:"type"`
	Events []osvEvent `json:"events"`
}

type osvEvent struct {
	Introduced string `json:"introduced"`
	Fixed      string `json:"fixed"`
}

type moduleVuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Fixed    string    `json:"fixed,omitempty"`
}

type moduleIndex struct {
	Path  string       `json:"path"`
	Vulns []moduleVuln `json:"vulns"`
}

type vulnIndex struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Aliases  []string  `json:"aliases,omitempty"`
}

// writeDB writes the database of the OSV entries in osvDir (one <ID>.json each) to out in the
// v1 layout of https://go.dev/security/vuln/database: index/db.json, index/modules.json,
// index/vulns.json and ID/<ID>.json. published is the database's date: data/osv leaves every
// entry's modified time zero (the deployed database takes them from git history).
func writeDB(osvDir, out string, published time.Time) error {
	files, err := filepath.Glob(filepath.Join(osvDir, "*.json"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no OSV entries in %s (%v)", osvDir, err)
	}
	for _, sub := range []string{"ID", "index"} {
		if err := os.MkdirAll(filepath.Join(out, sub), 0o755); err != nil {
			return err
		}
	}
	var vulns []vulnIndex
	ranges := map[string]map[string][]osvRange{} // module → ID → every range naming it
	modified := map[string]time.Time{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var e osvEntry
		if err := json.Unmarshal(b, &e); err != nil || e.ID+".json" != filepath.Base(f) {
			return fmt.Errorf("%s: not the OSV entry it is named after (%v)", f, err)
		}
		if err := os.WriteFile(filepath.Join(out, "ID", e.ID+".json"), b, 0o644); err != nil {
			return err
		}
		modified[e.ID] = e.Modified
		vulns = append(vulns, vulnIndex{ID: e.ID, Modified: e.Modified, Aliases: e.Aliases})
		for _, a := range e.Affected {
			if ranges[a.Package.Name] == nil {
				ranges[a.Package.Name] = map[string][]osvRange{}
			}
			ranges[a.Package.Name][e.ID] = append(ranges[a.Package.Name][e.ID], a.Ranges...)
		}
	}
	var modules []moduleIndex
	for _, path := range slices.Sorted(maps.Keys(ranges)) {
		m := moduleIndex{Path: path}
		for _, id := range slices.Sorted(maps.Keys(ranges[path])) {
			m.Vulns = append(m.Vulns, moduleVuln{ID: id, Modified: modified[id], Fixed: latestFixed(ranges[path][id])})
		}
		modules = append(modules, m)
	}
	slices.SortFunc(vulns, func(a, b vulnIndex) int { return strings.Compare(a.ID, b.ID) })
	for name, v := range map[string]any{"db": map[string]time.Time{"modified": published}, "modules": modules, "vulns": vulns} {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "index", name+".json"), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// latestFixed is the version at or after which a module is safe, or "" when none is (a range
// without a fix, or one reintroduced after the last fix). govulncheck fetches an entry only
// for a module older than this, so erring towards "" costs time, never a finding.
func latestFixed(ranges []osvRange) string {
	fixed := ""
	for _, r := range ranges {
		if r.Type != "SEMVER" {
			continue
		}
		fixedHere := false
		for _, e := range r.Events {
			if e.Fixed != "" && (fixed == "" || semver.Compare("v"+e.Fixed, "v"+fixed) > 0) {
				fixed = e.Fixed
			}
			fixedHere = fixedHere || e.Fixed != ""
		}
		if !fixedHere {
			return ""
		}
	}
	for _, r := range ranges {
		for _, e := range r.Events {
			if e.Introduced != "" && e.Introduced != "0" && (fixed == "" || semver.Compare("v"+e.Introduced, "v"+fixed) > 0) {
				return ""
			}
		}
	}
	return fixed
}

package ci

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// shellRuns returns the programs the shell scripts under root (*.sh and .ci/run) and the
// Makefile's recipes run.
func shellRuns(root string) ([]run, error) {
	scripts, err := filepath.Glob(filepath.Join(root, "hack", "*", "*.sh"))
	if err != nil {
		return nil, err
	}
	more, _ := filepath.Glob(filepath.Join(root, "hack", "*.sh"))
	scripts = append(append(scripts, more...), filepath.Join(root, ".ci", "run"))
	var runs []run
	for _, path := range scripts {
		r, err := scriptRuns(root, path, func(string) bool { return true })
		if err != nil {
			return nil, err
		}
		runs = append(runs, r...)
	}
	// A recipe line starts with a tab; the rest of the Makefile is make's own language.
	r, err := scriptRuns(root, filepath.Join(root, "Makefile"), func(line string) bool { return strings.HasPrefix(line, "\t") })
	return append(runs, r...), err
}

func scriptRuns(root, path string, isRecipe func(string) bool) ([]run, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rel, _ := filepath.Rel(root, path)
	makefile := filepath.Base(path) == "Makefile"
	functions := map[string]bool{} // the script's own shell functions
	for _, m := range shellFunction.FindAllStringSubmatch(string(data), -1) {
		functions[m[1]] = true
	}
	var runs []run
	heredoc := "" // the word that ends the here-document being read
	lines := bufio.NewScanner(strings.NewReader(string(data)))
	for n, first := 1, 1; lines.Scan(); n++ {
		line := lines.Text()
		for strings.HasSuffix(line, "\\") && lines.Scan() { // one command, continued
			line = strings.TrimSuffix(line, "\\") + " " + strings.TrimLeft(lines.Text(), "\t")
			n++
		}
		if heredoc != "" {
			if strings.TrimSpace(line) == heredoc {
				heredoc = ""
			}
			continue
		}
		if !isRecipe(line) {
			continue
		}
		if m := hereDocument.FindStringSubmatch(line); m != nil {
			heredoc = m[1]
		}
		// make's prefixes of a recipe line: silent, ignore errors, always run.
		line = strings.TrimLeft(line, "@-+ \t")
		if makefile {
			line = strings.ReplaceAll(makeVariable.ReplaceAllString(line, "$$V"), "$$", "$")
		}
		for _, p := range scriptPrograms(line) {
			if !functions[p] {
				runs = append(runs, run{p, rel + ":" + strconv.Itoa(first)})
			}
		}
		first = n + 1
	}
	return runs, lines.Err()
}

var (
	shellFunction = regexp.MustCompile(`(?m)^([A-Za-z_][A-Za-z0-9_]*)\(\)\s*\{`)
	hereDocument  = regexp.MustCompile(`<<-?\s*'?"?([A-Za-z_]+)`)
	makeVariable  = regexp.MustCompile(`\$\([A-Za-z_][A-Za-z0-9_]*\)`)
	arithmetic    = regexp.MustCompile(`\$\(\([^)]*\)\)`)
	singleQuoted  = regexp.MustCompile(`'[^']*'`)
	doubleQuoted  = regexp.MustCompile(`"(\\.|[^"\\])*"`)
	substitution  = regexp.MustCompile(`\$\(([^()]*)\)`)
	// Where a new command starts in a line of shell.
	commandStart = regexp.MustCompile(`\|\||&&|[|;({}` + "`" + `]|\$\(`)
	word         = regexp.MustCompile(`^[A-Za-z0-9/._+-]+$`)
	// Words after which the next word is a command: control words and programs that run
	// another (time, exec, xargs, timeout, flock, nice, env).
	leading = map[string]bool{}
	// Words that start a command of the shell's own: the rest of it runs nothing.
	builtin = map[string]bool{}
)

func init() {
	for _, w := range strings.Fields("if elif then else do while until ! time exec nice") {
		leading[w] = true
	}
	for _, w := range strings.Fields(`fi done esac case for in function return exit local export set unset cd echo
		printf test [ [[ ]] true false read shift eval wait trap source . break continue declare readonly
		command type :`) {
		builtin[w] = true
	}
}

// scriptPrograms returns the programs one line of shell runs: the first word of each command
// in it that is not the shell's own, an assignment, a variable or a quoted string, with the
// commands substituted inside double quotes.
func scriptPrograms(line string) []string {
	line = arithmetic.ReplaceAllString(strings.TrimSpace(line), "0")
	line = singleQuoted.ReplaceAllString(line, "''")
	var inner []string
	line = doubleQuoted.ReplaceAllStringFunc(line, func(q string) string {
		for _, m := range substitution.FindAllStringSubmatch(q, -1) {
			inner = append(inner, m[1])
		}
		return `""`
	})
	if i := strings.Index(line, "#"); i >= 0 && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
		line = line[:i]
	}
	var out []string
	for _, part := range append(commandStart.Split(line, -1), inner...) {
		fields := strings.Fields(part)
		for len(fields) > 0 && (strings.Contains(fields[0], "=") || leading[fields[0]]) {
			fields = fields[1:]
		}
		if len(fields) == 0 || builtin[fields[0]] || !word.MatchString(fields[0]) {
			continue
		}
		out = append(out, fields[0])
		if len(fields) > 1 && (fields[0] == "xargs" || fields[0] == "env") {
			out = append(out, scriptPrograms(strings.Join(fields[1:], " "))...)
		}
	}
	return out
}

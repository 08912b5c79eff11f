package main

import (
	"os"
	"strings"
	"testing"
)

// TestSummarize reads testdata/sample.jsonl, recorded with
//
//	go test -json -count=1 ./hack/testsummary/testdata/{sample,broken,notests}
//
// and prints what plain `go test` printed for the same packages (sample.golden: its lines, the
// packages in the order they finished), then the two skipped tests with their t.Skip messages
// and the hint.
func TestSummarize(t *testing.T) {
	in, err := os.Open("testdata/sample.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	want, err := os.ReadFile("testdata/sample.golden")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := summarize(in, &out, "HINT: run as root"); err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestUnfinishedPackage: when go test dies mid-package (a timeout's panic, a kill), everything
// the package said is shown, and lines that are not JSON pass through.
func TestUnfinishedPackage(t *testing.T) {
	in := strings.Join([]string{
		`not json: go vet said something`,
		`{"Action":"start","Package":"p"}`,
		`{"Action":"run","Package":"p","Test":"TestHangs"}`,
		`{"Action":"output","Package":"p","Test":"TestHangs","Output":"=== RUN   TestHangs\n"}`,
		`{"Action":"output","Package":"p","Test":"TestHangs","Output":"    hang_test.go:9: waiting\n"}`,
		`{"Action":"output","Package":"p","Output":"panic: test timed out after 1s\n"}`,
	}, "\n")
	var out strings.Builder
	if err := summarize(strings.NewReader(in), &out, "HINT"); err != nil {
		t.Fatal(err)
	}
	want := "not json: go vet said something\n    hang_test.go:9: waiting\npanic: test timed out after 1s\n"
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

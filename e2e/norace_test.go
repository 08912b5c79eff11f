//go:build !race

package e2e

// raceDetector: see race_test.go. Benchmarks run without it, so their timings are the
// binaries' own.
const raceDetector = false

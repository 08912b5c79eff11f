//go:build race

package e2e

// raceDetector: this test binary has the race detector (make test), so the binaries it starts
// get it too, and a race they report fails the test that started them (checkRaces).
const raceDetector = true

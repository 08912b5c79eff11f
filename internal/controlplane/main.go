package controlplane

import (
	"flag"
	"fmt"
	"io"
	"os"

	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Tests is what Main runs: a TestMain's *testing.M.
type Tests interface{ Run() int }

// Main is a TestMain for packages whose tests share one control plane: it starts it, stores
// it in *cp, runs the tests and stops it. A missing binary fails the package, never skips it.
func Main(m Tests, cp **ControlPlane) { MainWith(m, cp, Options{}) }

// MainWith is Main with options, e.g. a dual-stack service CIDR.
func MainWith(m Tests, cp **ControlPlane, opts Options) {
	QuietLogs()
	if fuzzing() {
		os.Exit(m.Run()) // fuzz targets are pure: no control plane per fuzz worker
	}
	started, err := Start(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		os.Exit(1)
	}
	*cp = started
	code := m.Run()
	if err := started.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// QuietLogs sends controller-runtime's logs from test processes nowhere, unless
// PORTICO_TEST_LOGS=1 asks for them on stderr.
func QuietLogs() {
	out := io.Discard
	if os.Getenv("PORTICO_TEST_LOGS") == "1" {
		out = os.Stderr
	}
	logf.SetLogger(zap.New(zap.WriteTo(out)))
}

// fuzzing reports whether this test binary runs a fuzz target (`go test -fuzz`, as
// coordinator or worker): `make fuzz` selects no tests, only pure fuzz functions.
func fuzzing() bool {
	flag.Parse()
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}

package netlab

import "fmt"

// Owner lets a program, not a test, build labs (the demo, `make cluster`): Fatalf panics with
// a failure that Recovered turns back into an error; cleanups run in reverse on Stop.
type Owner struct{ cleanups []func() }

type ownerFailure struct{ err error }

func (o *Owner) Helper()                   {}
func (o *Owner) Cleanup(f func())          { o.cleanups = append(o.cleanups, f) }
func (o *Owner) Fatalf(f string, a ...any) { panic(ownerFailure{fmt.Errorf(f, a...)}) }

// Stop runs the cleanups, the last registered first.
func (o *Owner) Stop() {
	for i := len(o.cleanups) - 1; i >= 0; i-- {
		o.cleanups[i]()
	}
	o.cleanups = nil
}

// Recovered is the error of a Fatalf given recover()'s value, after running the cleanups; nil
// when nothing panicked. Any other panic goes on.
func (o *Owner) Recovered(r any) error {
	if r == nil {
		return nil
	}
	f, ok := r.(ownerFailure)
	if !ok {
		panic(r)
	}
	o.Stop()
	return f.err
}

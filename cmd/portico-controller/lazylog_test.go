package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// TestLazyValuesWritesWhatZapWould: a line written through the wrapper carries the values and
// names given before it, in order, as zap alone writes them.
func TestLazyValuesWritesWhatZapWould(t *testing.T) {
	write := func(log logr.Logger) {
		log = log.WithName("controller").WithValues("service", "apps/gitea").WithValues("reconcileID", "r1")
		log.Info("decided", "ips", 1)
		log.V(1).Info("not written")
		log.Error(errors.New("boom"), "failed")
	}
	var direct, lazy bytes.Buffer
	write(zap.New(zap.WriteTo(&direct)))
	write(logr.New(lazyValues{sink: zap.New(zap.WriteTo(&lazy)).GetSink()}))
	strip := func(s string) string { // timestamps differ, and the stack below the line logging
		var out []string
		for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
			if i := strings.Index(line, `"logger"`); i >= 0 {
				line = line[i:]
			}
			if i := strings.Index(line, `lazylog_test.go:`); i >= 0 {
				line = line[:i+len(`lazylog_test.go:20`)] // the frame that logged: the call depth is right
			}
			out = append(out, line)
		}
		return strings.Join(out, "\n")
	}
	if got, want := strip(lazy.String()), strip(direct.String()); got != want || !strings.Contains(got, `"service":"apps/gitea","reconcileID":"r1","ips":1`) {
		t.Errorf("through lazyValues:\n%s\nzap alone:\n%s", got, want)
	}
}

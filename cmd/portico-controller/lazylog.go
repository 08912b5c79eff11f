package main

import (
	"slices"

	"github.com/go-logr/logr"
)

// lazyValues defers a logger's WithValues until a line is written. controller-runtime gives
// every reconcile a logger naming the object and a reconcile ID, and zap encodes those at once
// (a copy of its encoder, a buffer, the object's name through reflection): at 5000 Services
// that was a quarter of everything the controller allocated, for lines almost never written.
type lazyValues struct {
	sink   logr.LogSink // without values
	values []any        // added to each line written
}

// Init: the sink was initialised by the logger it came from, for a call depth of one; this
// wrapper's methods add the one more frame that adds.
func (l lazyValues) Init(info logr.RuntimeInfo) { l.sink.Init(info) }

func (l lazyValues) Enabled(level int) bool { return l.sink.Enabled(level) }

func (l lazyValues) Info(level int, msg string, keysAndValues ...any) {
	l.bound().Info(level, msg, keysAndValues...)
}

func (l lazyValues) Error(err error, msg string, keysAndValues ...any) {
	l.bound().Error(err, msg, keysAndValues...)
}

func (l lazyValues) WithValues(keysAndValues ...any) logr.LogSink {
	return lazyValues{sink: l.sink, values: append(slices.Clip(l.values), keysAndValues...)}
}

func (l lazyValues) WithName(name string) logr.LogSink {
	return lazyValues{sink: l.sink.WithName(name), values: l.values}
}

func (l lazyValues) bound() logr.LogSink {
	if len(l.values) == 0 {
		return l.sink
	}
	return l.sink.WithValues(l.values...)
}

package bgp

import (
	"github.com/go-logr/logr"
	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
)

// gobgpLogger sends GoBGP's logs to logr: its errors as errors, its warnings at the default
// level, its (chatty) info at V(1), its debug nowhere.
type gobgpLogger struct{ log logr.Logger }

func kv(f gobgplog.Fields) []any {
	out := make([]any, 0, 2*len(f))
	for k, v := range f {
		out = append(out, k, v)
	}
	return out
}

func (l gobgpLogger) Panic(msg string, f gobgplog.Fields) {
	l.log.Error(nil, msg, kv(f)...)
	panic(msg)
}
func (l gobgpLogger) Fatal(msg string, f gobgplog.Fields) { l.log.Error(nil, msg, kv(f)...) }
func (l gobgpLogger) Error(msg string, f gobgplog.Fields) { l.log.Error(nil, msg, kv(f)...) }
func (l gobgpLogger) Warn(msg string, f gobgplog.Fields)  { l.log.Info(msg, kv(f)...) }
func (l gobgpLogger) Info(msg string, f gobgplog.Fields)  { l.log.V(1).Info(msg, kv(f)...) }
func (l gobgpLogger) Debug(string, gobgplog.Fields)       {}
func (l gobgpLogger) SetLevel(gobgplog.LogLevel)          {}
func (l gobgpLogger) GetLevel() gobgplog.LogLevel         { return gobgplog.InfoLevel }

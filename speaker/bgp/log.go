package bgp

import (
	"log/slog"

	"github.com/go-logr/logr"
)

// gobgpLogger sends GoBGP's slog records to logr one verbosity level down: its errors stay
// errors, its warnings land at the default level, its (chatty) info at V(1) and its debug (a
// line per received UPDATE) at V(5), which nothing enables.
func gobgpLogger(log logr.Logger) *slog.Logger {
	return slog.New(logr.ToSlogHandler(log.V(1)))
}

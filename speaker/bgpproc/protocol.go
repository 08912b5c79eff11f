package bgpproc

import (
	"encoding/gob"
	"errors"
	"net"
	"sync"

	"github.com/portico-lb/portico/speaker/plan"
)

// request is one message from the speaker to its BGP process; exactly one of Apply, Close,
// Leave, Ping and Metrics is set.
type request struct {
	ID    uint64
	Apply *plan.BGP
	Close bool // withdraw every route and close every session, then answer
	// Leave: close every session for a planned restart (bgp.Sessions.Leave: routers keep the
	// routes of those with graceful restart), then answer.
	Leave   bool
	Ping    bool
	Metrics bool
}

// answer is one message from the BGP process: the answer to request ID, or (ID 0) news that a
// session changed. States is every session's state when the message was written, so the
// latest message always holds the latest states.
type answer struct {
	ID      uint64
	Errors  []string // what Apply reported
	Metrics []byte   // the process's metric families, protobuf-delimited
	Kept    []string // the sessions Leave left for graceful restart
	States  map[string]plan.SessionState
}

// errGone answers the calls in flight when the BGP process goes away.
var errGone = errors.New("the BGP process is gone")

// stream is one end of the channel: a gob encoder and decoder on a connection, the encoder
// shared by the goroutines that write.
type stream struct {
	conn net.Conn
	dec  *gob.Decoder
	mu   sync.Mutex // serialises writes
	enc  *gob.Encoder
}

func newStream(conn net.Conn) *stream {
	return &stream{conn: conn, dec: gob.NewDecoder(conn), enc: gob.NewEncoder(conn)}
}

// send writes what make returns, made while the write lock is held (the child snapshots its
// states there, so messages leave in the order of their snapshots).
func (s *stream) send(make func() any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.enc.Encode(make())
}

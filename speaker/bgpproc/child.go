package bgpproc

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/portico-lb/portico/speaker/bgp"
	"github.com/portico-lb/portico/speaker/plan"
)

// speakerSilence is how long the BGP process waits for a word from the speaker (which pings
// every pingEvery) before it takes the speaker for hung; thawGrace is the second chance it
// then gives: after a freeze of the whole node both wake at once, and the speaker's overdue
// ping follows within milliseconds.
const (
	speakerSilence = 5 * pingEvery
	thawGrace      = time.Second
)

// Serve is the BGP process: it runs sessions for the speaker at the other end of conn and
// answers its requests until conn closes (the speaker exited: the sessions go down with this
// process, as they would have gone with the speaker, so graceful restart keeps the routes) or a
// Close request has been answered. gather holds the process's metrics (sessions and BFD).
//
// A speaker that is silent for speakerSilence (then thawGrace) is hung: its node's plan can no
// longer change, and its ARP/NDP answers have stopped, so the process withdraws every route
// and closes every session, as the BGP side did when it lived in the speaker and froze with it.
func Serve(conn net.Conn, sessions *bgp.Sessions, gather prometheus.Gatherer) error {
	return serve(conn, sessions, gather, speakerSilence)
}

func serve(conn net.Conn, sessions *bgp.Sessions, gather prometheus.Gatherer, silence time.Duration) error {
	// Closed on return, so the speaker sees this process done even before it exits.
	defer conn.Close()
	s := newStream(conn)
	snapshot := func(id uint64, a answer) func() any {
		return func() any {
			a.ID, a.States = id, sessions.States()
			return a
		}
	}
	sessions.SetOnChange(func(_, _ plan.SessionState) { _ = s.send(snapshot(0, answer{})) })
	requests, failed := make(chan request), make(chan error, 1)
	go func() {
		for {
			var r request
			if err := s.dec.Decode(&r); err != nil {
				failed <- err
				return
			}
			requests <- r
		}
	}()
	quiet := time.NewTimer(silence)
	graced := false
	for {
		var r request
		select {
		case err := <-failed:
			return fmt.Errorf("reading from the speaker: %w", err)
		case <-quiet.C:
			if !graced {
				graced = true
				quiet.Reset(thawGrace)
				continue
			}
			sessions.Close()
			return fmt.Errorf("the speaker said nothing for %v: taken for hung, every route withdrawn", silence+thawGrace)
		case r = <-requests:
			graced = false
			quiet.Reset(silence)
		}
		if handle(s, r, sessions, gather, snapshot) {
			return nil
		}
	}
}

// handle answers one request from the speaker; it reports whether the process is done.
func handle(s *stream, r request, sessions *bgp.Sessions, gather prometheus.Gatherer, snapshot func(uint64, answer) func() any) bool {
	switch {
	case r.Apply != nil:
		// In its own goroutine, so pings are answered while GoBGP works: a long Apply is
		// not a dead process (Sessions serialises Applies and Close).
		go func() {
			var msgs []string
			for _, err := range sessions.Apply(context.Background(), *r.Apply) {
				msgs = append(msgs, err.Error())
			}
			_ = s.send(snapshot(r.ID, answer{Errors: msgs}))
		}()
	case r.Close:
		sessions.Close()
		_ = s.send(snapshot(r.ID, answer{}))
		return true
	case r.Leave:
		kept := sessions.Leave()
		_ = s.send(snapshot(r.ID, answer{Kept: kept}))
		return true
	case r.Ping:
		// States takes the sessions' lock: a process stuck inside GoBGP with it held does
		// not answer.
		go func() { _ = s.send(snapshot(r.ID, answer{})) }()
	case r.Metrics:
		go func() { _ = s.send(snapshot(r.ID, answer{Metrics: encodeMetrics(gather)})) }()
	}
	return false
}

// encodeMetrics gathers the process's metric families for the speaker to serve.
func encodeMetrics(g prometheus.Gatherer) []byte {
	families, err := g.Gather()
	if err != nil {
		fmt.Fprintln(os.Stderr, "portico-speaker bgp: gathering metrics:", err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeProtoDelim))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			break
		}
	}
	return b.Bytes()
}

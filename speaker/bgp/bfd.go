package bgp

import (
	"context"
	"fmt"
	"time"

	api "github.com/osrg/gobgp/v4/api"

	"github.com/portico-lb/portico/speaker/bfd"
	"github.com/portico-lb/portico/speaker/plan"
)

// withoutBFD is p with its BFD settings cleared: a change to them alone reconfigures the BFD
// session and leaves the BGP session alone.
func withoutBFD(p plan.Peer) plan.Peer {
	p.BFD = bfd.Config{}
	return p
}

// syncBFD makes the BFD session watching ss match cfg: started, reconfigured (a poll sequence,
// the BGP session untouched) or stopped. Called with s.mu held.
func (s *Sessions) syncBFD(ss *session, cfg bfd.Config) error {
	switch {
	case cfg.DetectMult == 0:
		if ss.bfd != nil {
			ss.bfd.Stop()
			ss.bfd = nil
		}
		ss.peer.BFD = cfg
		return nil
	case ss.bfd != nil && cfg.Hops != ss.peer.BFD.Hops:
		ss.bfd.Stop() // another minimum TTL: a fresh session
		ss.bfd = nil
		return s.syncBFD(ss, cfg)
	case ss.bfd != nil:
		if cfg != ss.peer.BFD {
			ss.bfd.Reconfigure(cfg)
			ss.peer.BFD = cfg
		}
		return nil
	}
	if s.BFD == nil {
		s.BFD = bfd.NewManager(s.Log.WithName("bfd"))
	}
	p, err := s.BFD.Start(ss.peer.Name, ss.peer.Address, ss.peer.Source, cfg, func(tr bfd.Transition) {
		// Only a path failure seen here resets the session. A Down the router signals is its own
		// decision, acted on by its own BGP; resetting here too would loop: a router such as bird
		// re-creates its BFD session (a new discriminator, so a Down again) for every new BGP session.
		if tr.From == bfd.Up && tr.Diag == bfd.DiagDetectionExpired {
			go s.bfdDown(ss, tr)
		}
	})
	if err != nil {
		return fmt.Errorf("starting BFD: %w", err)
	}
	ss.bfd, ss.peer.BFD = p, cfg
	return nil
}

// bfdDown resets the BGP session whose BFD session just left Up: the path to the peer is gone,
// so the session and its routes go at once instead of when the hold time runs out. GoBGP
// reconnects by itself; the session comes back when the peer answers again.
func (s *Sessions) bfdDown(ss *session, tr bfd.Transition) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[ss.peer.Name] != ss {
		return // closed or replaced meanwhile
	}
	s.Log.Info("BFD session down: resetting the BGP session", "peer", ss.peer.Name, "address", ss.peer.Address,
		"bfdState", tr.To, "diagnostic", tr.Diag)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := ss.srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: ss.addr.String(),
		Communication: "BFD session down: " + tr.Diag.String()})
	if err != nil {
		s.Log.Error(err, "resetting the BGP session after BFD went down", "peer", ss.peer.Name)
	}
}

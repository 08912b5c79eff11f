package bgp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"
)

// State is one session's state as the speaker reports it.
type State struct {
	Peer    string
	Address netip.Addr
	State   string // Idle, Connect, Active, OpenSent, OpenConfirm, Established
	Since   time.Time
	Routes  int // routes this node advertises on the session
}

// Established reports whether the session is up.
func (s State) Established() bool { return s.State == "Established" }

// Sessions runs the node's BGP sessions: one embedded GoBGP server per peer.
type Sessions struct {
	Log logr.Logger
	// OnChange is called (from a GoBGP goroutine, without locks held) when a session changes
	// state, with the state before and after.
	OnChange func(before, after State)

	mu      sync.Mutex
	running map[string]*session
	spare   []*server.BgpServer // stopped servers, reused: a GoBGP server's loop never ends
}

type session struct {
	peer   Peer
	srv    *server.BgpServer
	cancel context.CancelFunc // ends the state watch
	routes map[netip.Prefix]Route
	state  State
}

// Apply makes the running sessions and routes match d. A peer whose settings changed gets a
// fresh session; other sessions are not touched. Routes are added, replaced (new attributes)
// or withdrawn one by one. It returns the problems it met (a peer GoBGP refused, ...).
func (s *Sessions) Apply(ctx context.Context, d Desired) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		s.running = map[string]*session{}
	}
	var errs []error
	for name, ss := range s.running {
		if p, ok := d.Peers[name]; !ok || p != ss.peer {
			why := "removed"
			if ok {
				why = "changed"
			}
			s.Log.Info("closing BGP session", "peer", name, "address", ss.peer.Address, "reason", why)
			s.stop(ctx, ss)
			delete(s.running, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(d.Peers)) {
		ss := s.running[name]
		if ss == nil {
			var err error
			if ss, err = s.start(ctx, d.Peers[name]); err != nil {
				errs = append(errs, fmt.Errorf("BGPPeer %s: %w", name, err))
				continue
			}
			s.running[name] = ss
		}
		errs = append(errs, ss.sync(ctx, d.Routes[name])...)
	}
	return errs
}

// Close withdraws every route and closes every session (a NOTIFICATION Cease, so routers drop
// this node's routes at once, graceful restart or not).
func (s *Sessions) Close(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, ss := range s.running {
		_ = ss.sync(ctx, nil)
		s.stop(ctx, ss)
		delete(s.running, name)
	}
}

// States lists the sessions' states by peer name.
func (s *Sessions) States() map[string]State {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]State, len(s.running))
	for name, ss := range s.running {
		st := ss.state
		st.Routes = len(ss.routes)
		out[name] = st
	}
	return out
}

func (s *Sessions) start(ctx context.Context, p Peer) (*session, error) {
	var srv *server.BgpServer
	if n := len(s.spare); n > 0 {
		srv, s.spare = s.spare[n-1], s.spare[:n-1]
	} else {
		srv = server.NewBgpServer(server.LoggerOption(gobgpLogger{s.Log.WithName("gobgp").WithValues("peer", p.Name)}))
		go srv.Serve()
	}
	// ListenPort -1: connect out only; the speaker never listens on 179.
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: p.MyASN, RouterId: p.RouterID.String(), ListenPort: -1}}); err != nil {
		s.spare = append(s.spare, srv)
		return nil, fmt.Errorf("starting BGP: %w", err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	ss := &session{peer: p, srv: srv, cancel: cancel, routes: map[netip.Prefix]Route{},
		state: State{Peer: p.Name, Address: p.Address, State: "Idle", Since: time.Now()}}
	err := srv.WatchEvent(wctx, &api.WatchEventRequest{Peer: &api.WatchEventRequest_Peer{}}, func(r *api.WatchEventResponse) {
		pe := r.GetPeer()
		if pe == nil || pe.Type != api.WatchEventResponse_PeerEvent_STATE || pe.Peer.GetState() == nil {
			return
		}
		s.observe(ss, stateName(pe.Peer.State.SessionState))
	})
	if err == nil {
		err = srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(p)})
	}
	if err != nil {
		cancel()
		_ = srv.StopBgp(ctx, &api.StopBgpRequest{})
		s.spare = append(s.spare, srv)
		return nil, err
	}
	s.Log.Info("opening BGP session", "peer", p.Name, "address", p.Address, "peerASN", p.PeerASN, "myASN", p.MyASN,
		"routerID", p.RouterID, "md5", p.Password != "")
	return ss, nil
}

func (s *Sessions) observe(ss *session, state string) {
	s.mu.Lock()
	before := ss.state
	if before.State == state {
		s.mu.Unlock()
		return
	}
	ss.state.State, ss.state.Since = state, time.Now()
	after := ss.state
	before.Routes, after.Routes = len(ss.routes), len(ss.routes)
	s.mu.Unlock()
	if before.Established() && state == "Idle" {
		go s.redial(ss)
	}
	if s.OnChange != nil {
		s.OnChange(before, after)
	}
}

// redial re-creates the neighbour of a session that just dropped. GoBGP holds a neighbour in
// Idle for a fixed 5 s after its session drops; a fresh neighbour connects within its connect
// retry (1–2 s), so a restarted router gets its routes back that much sooner. The routes stay
// in the server's RIB and are sent again once the session is up.
func (s *Sessions) redial(ss *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[ss.peer.Name] != ss {
		return // closed or replaced meanwhile
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := ss.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: ss.peer.Address.String()})
	if err == nil {
		err = ss.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(ss.peer)})
	}
	if err != nil {
		s.Log.Error(err, "re-creating a dropped BGP neighbour", "peer", ss.peer.Name)
	}
}

// stop closes the session and keeps its server for reuse.
func (s *Sessions) stop(ctx context.Context, ss *session) {
	ss.cancel()
	if err := ss.srv.StopBgp(ctx, &api.StopBgpRequest{}); err != nil {
		s.Log.Error(err, "stopping BGP", "peer", ss.peer.Name)
	}
	s.spare = append(s.spare, ss.srv)
}

// sync makes the session's RIB hold exactly want.
func (ss *session) sync(ctx context.Context, want map[netip.Prefix]Route) []error {
	var errs []error
	for pfx, r := range ss.routes {
		if _, keep := want[pfx]; keep {
			continue
		}
		p := apiPath(r)
		if err := ss.srv.DeletePath(ctx, &api.DeletePathRequest{Family: p.Family, Path: p}); err != nil {
			errs = append(errs, fmt.Errorf("withdrawing %s from BGPPeer %s: %w", pfx, ss.peer.Name, err))
			continue
		}
		delete(ss.routes, pfx)
	}
	for pfx, r := range want {
		if old, had := ss.routes[pfx]; had && old.Attrs.Equal(r.Attrs) {
			ss.routes[pfx] = r // the Services it carries may have changed
			continue
		}
		// Adding a path for a prefix this server already originates replaces it (an implicit
		// withdraw at the router), so changed attributes need no explicit withdraw.
		if _, err := ss.srv.AddPath(ctx, &api.AddPathRequest{Path: apiPath(r)}); err != nil {
			errs = append(errs, fmt.Errorf("advertising %s to BGPPeer %s: %w", pfx, ss.peer.Name, err))
			continue
		}
		ss.routes[pfx] = r
	}
	return errs
}

// Counters are GoBGP's message counters for one session.
type Counters struct {
	UpdatesSent, UpdatesReceived uint64
}

// Counters reads every session's message counters from GoBGP.
func (s *Sessions) Counters(ctx context.Context) map[string]Counters {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]Counters{}
	for name, ss := range s.running {
		err := ss.srv.ListPeer(ctx, &api.ListPeerRequest{Address: ss.peer.Address.String()}, func(p *api.Peer) {
			m := p.GetState().GetMessages()
			out[name] = Counters{UpdatesSent: m.GetSent().GetUpdate(), UpdatesReceived: m.GetReceived().GetUpdate()}
		})
		if err != nil && !errors.Is(err, context.Canceled) {
			s.Log.V(1).Info("reading GoBGP counters", "peer", name, "error", err.Error())
		}
	}
	return out
}

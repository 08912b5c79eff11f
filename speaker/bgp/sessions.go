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
	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/bfd"
	"github.com/portico-lb/portico/speaker/plan"
)

// Sessions runs the node's BGP sessions: one embedded GoBGP server per peer. (GoBGP v4.8.0
// keeps its route selection options in package variables that each server's StartBgp writes
// while the others read them: a data race, harmless here since every server writes the same
// zero values; osrg/gobgp#3659 moves them into the server.)
type Sessions struct {
	Log logr.Logger
	// BFD runs the BFD sessions of the peers that ask for one; made on first use when nil.
	BFD *bfd.Manager

	mu       sync.Mutex
	onChange func(before, after plan.SessionState) // SetOnChange's
	running  map[string]*session
	ceases   map[string]uint64 // sessions ceased for their prefix limit, by peer name
}

type session struct {
	peer   plan.Peer
	addr   netip.Addr // the GoBGP neighbour: peer.Address, or the router found on peer.Interface
	srv    *server.BgpServer
	cancel context.CancelFunc // ends the state watch
	routes map[netip.Prefix]plan.Route
	state  plan.SessionState
	bfd    *bfd.Peer   // nil: no BFD session watches this one
	retry  *time.Timer // opens a session ceased for its prefix limit again; nil when none waits
}

// Apply makes the running sessions and routes match d. A peer whose settings changed gets a
// fresh session; other sessions are not touched. Routes are added, replaced (new attributes)
// or withdrawn one by one. It returns the problems it met (a peer GoBGP refused, ...).
func (s *Sessions) Apply(ctx context.Context, d plan.BGP) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		s.running = map[string]*session{}
	}
	var errs []error
	for name, ss := range s.running {
		if p, ok := d.Peers[name]; !ok || withoutBFD(p) != withoutBFD(ss.peer) {
			why := "removed"
			if ok {
				why = "changed"
			}
			s.Log.Info("closing BGP session", "peer", name, "address", ss.peer.Address, "reason", why)
			s.stop(ss)
			delete(s.running, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(d.Peers)) {
		ss := s.running[name]
		changed, some := d.Changed[name], d.Changed != nil
		if ss == nil {
			some = false // a new session gets every route
			var err error
			if ss, err = s.start(ctx, d.Peers[name]); err != nil {
				errs = append(errs, fmt.Errorf("BGPPeer %s: %w", name, err))
				continue
			}
			s.running[name] = ss
		}
		if err := s.syncBFD(ss, d.Peers[name].BFD); err != nil {
			errs = append(errs, fmt.Errorf("BGPPeer %s: %w", name, err))
		}
		if some {
			errs = append(errs, ss.syncSome(d.Routes[name], changed)...)
			continue
		}
		errs = append(errs, ss.sync(d.Routes[name])...)
	}
	return errs
}

// Close withdraws every route and closes every session (a NOTIFICATION Cease, so routers drop
// this node's routes at once, graceful restart or not).
func (s *Sessions) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, ss := range s.running {
		_ = ss.sync(nil)
		s.stop(ss)
		delete(s.running, name)
	}
}

// Leave closes every session for a planned restart of the speaker on a node that stays. A
// session with graceful restart on ends without withdrawing and without a NOTIFICATION (its TCP
// connection just closes), so a router that negotiated graceful restart keeps this node's
// routes, stale, for the restart time, and the next speaker's session (opened as restarting,
// apiPeer) refreshes them; a router that did not negotiate it gets a Cease and drops them (GoBGP
// sends one where graceful restart was not negotiated). Any other session is closed as by
// Close. It returns the names of the sessions left for graceful restart.
func (s *Sessions) Leave() (kept []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, ss := range s.running {
		delete(s.running, name)
		if !ss.peer.GracefulRestart {
			_ = ss.sync(nil)
			s.stop(ss)
			continue
		}
		s.stopGracefully(ss)
		kept = append(kept, name)
	}
	slices.Sort(kept)
	return kept
}

// SetOnChange sets the function called (from a GoBGP goroutine, without locks held) when a
// session changes state, with the state before and after.
func (s *Sessions) SetOnChange(f func(before, after plan.SessionState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onChange = f
}

// States lists the sessions' states by peer name.
func (s *Sessions) States() map[string]plan.SessionState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]plan.SessionState, len(s.running))
	for name, ss := range s.running {
		st := ss.state
		st.Routes = len(ss.routes)
		out[name] = st
	}
	return out
}

func (s *Sessions) start(ctx context.Context, p plan.Peer) (*session, error) {
	srv := server.NewBgpServer(server.LoggerOption(gobgpLogger(s.Log.WithName("gobgp").WithValues("peer", p.Name)), nil))
	go srv.Serve()
	// ListenPort -1: connect out only; the speaker never listens on 179. Only the unicast
	// families: GoBGP makes two RIB tables of 2048 shards per family it is given, and with none
	// given it makes them for all of its twenty-odd families (about 13 MiB per session).
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: p.MyASN, RouterId: p.RouterID.String(), ListenPort: -1,
		Families: unicastFamilies}}); err != nil {
		srv.Stop()
		return nil, fmt.Errorf("starting BGP: %w", err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	ss := &session{peer: p, addr: p.Address, srv: srv, cancel: cancel, routes: map[netip.Prefix]plan.Route{},
		state: plan.SessionState{Peer: p.Name, Address: p.Address, State: "Idle", Since: time.Now()}}
	err := rejectImports(ctx, srv)
	if err == nil {
		err = srv.WatchEvent(wctx, server.WatchEventMessageCallbacks{OnPeerUpdate: func(pe *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
			if pe.Type == apiutil.PEER_EVENT_STATE {
				s.observe(ss, stateName(pe.Peer.State.SessionState), pe.Peer.State.PeerASN, pe.Peer.State.AdminState)
			}
		}}, server.WatchPeer())
	}
	switch {
	case err == nil && p.Interface != "":
		go s.dialUnnumbered(wctx, ss) // the router's address is not known yet
	case err == nil:
		err = srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(p, p.Address, true)})
	}
	if err != nil {
		cancel()
		srv.Stop()
		return nil, err
	}
	s.Log.Info("opening BGP session", "peer", p.Name, "address", p.Where(), "peerASN", p.PeerASN, "myASN", p.MyASN,
		"routerID", p.RouterID, "md5", p.Password != "")
	return ss, nil
}

// observe takes a session's new state from GoBGP, with its administrative state: a session
// GoBGP ceased for its prefix limit stays down until ceasedForLimit's retry, others that drop
// are opened again at once (redial).
func (s *Sessions) observe(ss *session, state string, peerASN uint32, admin api.PeerState_AdminState) {
	s.mu.Lock()
	before := ss.state
	if before.State == state {
		s.mu.Unlock()
		return
	}
	ss.state.State, ss.state.Since = state, time.Now()
	switch {
	case state == "Established":
		ss.state.PeerASN = peerASN
		if ss.state.Reason == v1alpha1.ReasonPrefixLimitReached {
			ss.state.Reason, ss.state.Message = "", ""
		}
	case state == "Idle" && admin == api.PeerState_ADMIN_STATE_PFX_CT && s.running[ss.peer.Name] == ss:
		s.ceasedForLimit(ss)
	}
	after := ss.state
	before.Routes, after.Routes = len(ss.routes), len(ss.routes)
	refused := ss.state.Message != ""
	onChange := s.onChange
	s.mu.Unlock()
	switch {
	case state == "Established" && ss.peer.ExternalOnly && peerASN == ss.peer.MyASN:
		go s.refuseInternal(ss)
	case before.Established() && state == "Idle" && !refused:
		go s.redial(ss)
	}
	if onChange != nil {
		onChange(before, after)
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
	err := ss.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: ss.addr.String()})
	if err == nil {
		err = ss.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(ss.peer, ss.addr, false)})
	}
	if err != nil {
		s.Log.Error(err, "re-creating a dropped BGP neighbour", "peer", ss.peer.Name)
	}
}

// refuseInternal shuts down a dynamicASN external session whose router turned out to be in
// this node's own AS: it stays down (administratively, so GoBGP does not redial) with the
// reason in the Speaker status until the BGPPeer changes.
func (s *Sessions) refuseInternal(ss *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[ss.peer.Name] != ss {
		return
	}
	ss.state.Message = fmt.Sprintf("refused: the router is in AS %d, this node's own, and the BGPPeer's dynamicASN is external", ss.peer.MyASN)
	s.Log.Info("BGP session refused", "peer", ss.peer.Name, "reason", ss.state.Message)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ss.srv.ShutdownPeer(ctx, &api.ShutdownPeerRequest{Address: ss.addr.String(), Communication: ss.state.Message}); err != nil {
		s.Log.Error(err, "shutting down a refused BGP session", "peer", ss.peer.Name)
	}
}

// stop closes the session (a NOTIFICATION Cease) and ends its server's goroutines.
func (s *Sessions) stop(ss *session) {
	s.end(ss, func() { ss.srv.Stop() }) // logs its own failure through the session's logger
}

// stopGracefully closes the session without a NOTIFICATION where graceful restart was
// negotiated (GoBGP sends a Cease where it was not) and ends its server's goroutines.
func (s *Sessions) stopGracefully(ss *session) {
	s.end(ss, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := ss.srv.StopBgp(ctx, &api.StopBgpRequest{AllowGracefulRestart: true}); err != nil {
			s.Log.Error(err, "leaving a BGP session for graceful restart", "peer", ss.peer.Name)
		}
	})
}

// end stops the session's BFD (which tells the router AdminDown) and its state watch, then the
// server with stopServer.
func (s *Sessions) end(ss *session, stopServer func()) {
	if ss.bfd != nil {
		ss.bfd.Stop()
	}
	if ss.retry != nil {
		ss.retry.Stop()
	}
	ss.cancel()
	stopServer()
}

// sync makes the session's RIB hold exactly want.
func (ss *session) sync(want map[netip.Prefix]plan.Route) []error {
	var errs []error
	for pfx := range ss.routes {
		if _, keep := want[pfx]; !keep {
			errs = ss.syncPrefix(want, pfx, errs)
		}
	}
	for pfx := range want {
		errs = ss.syncPrefix(want, pfx, errs)
	}
	return errs
}

// syncSome is sync for the prefixes that may have changed alone.
func (ss *session) syncSome(want map[netip.Prefix]plan.Route, changed []netip.Prefix) []error {
	var errs []error
	for _, pfx := range changed {
		errs = ss.syncPrefix(want, pfx, errs)
	}
	return errs
}

// syncPrefix withdraws, adds or replaces the path of one prefix as want says.
func (ss *session) syncPrefix(want map[netip.Prefix]plan.Route, pfx netip.Prefix, errs []error) []error {
	r, wanted := want[pfx]
	old, had := ss.routes[pfx]
	switch {
	case !wanted && had:
		if err := ss.srv.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{apiPath(old, ss.peer.MyASN)}}); err != nil {
			return append(errs, fmt.Errorf("withdrawing %s from BGPPeer %s: %w", pfx, ss.peer.Name, err))
		}
		delete(ss.routes, pfx)
	case !wanted:
	case had && old.Attrs.Equal(r.Attrs):
		ss.routes[pfx] = r // the Services it carries may have changed
	default:
		// Adding a path for a prefix this server already originates replaces it (an implicit
		// withdraw at the router), so changed attributes need no explicit withdraw.
		if _, err := ss.srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{apiPath(r, ss.peer.MyASN)}}); err != nil {
			return append(errs, fmt.Errorf("advertising %s to BGPPeer %s: %w", pfx, ss.peer.Name, err))
		}
		ss.routes[pfx] = r
	}
	return errs
}

// Counters are GoBGP's message counters for one session, and what it holds of the peer's routes.
type Counters struct {
	UpdatesSent, UpdatesReceived uint64
	// PrefixesReceived counts the routes the peer sent that GoBGP keeps in the session's
	// Adj-RIB-In (it always does); PrefixesAccepted those of them in the RIB after the import
	// policy, which rejects them all, so it stays 0 however many routes the peer sends.
	PrefixesReceived, PrefixesAccepted uint64
}

// Counters reads every session's message counters and received routes from GoBGP.
func (s *Sessions) Counters(ctx context.Context) map[string]Counters {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]Counters{}
	for name, ss := range s.running {
		var c Counters
		if !ss.addr.IsValid() {
			out[name] = Counters{} // an unnumbered router not found yet
			continue
		}
		err := ss.srv.ListPeer(ctx, &api.ListPeerRequest{Address: ss.addr.String()}, func(p *api.Peer) {
			m := p.GetState().GetMessages()
			c.UpdatesSent, c.UpdatesReceived = m.GetSent().GetUpdate(), m.GetReceived().GetUpdate()
			for _, as := range p.GetAfiSafis() {
				c.PrefixesReceived += as.GetState().GetReceived()
			}
		})
		for _, fam := range []bgp.Family{bgp.RF_IPv4_UC, bgp.RF_IPv6_UC} {
			if err != nil {
				break
			}
			err = ss.srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: fam},
				func(_ bgp.NLRI, paths []*apiutil.Path) {
					for _, p := range paths {
						if p.PeerAddress.IsValid() { // learned from the peer; the speaker's own paths have no source
							c.PrefixesAccepted++
						}
					}
				})
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			s.Log.V(1).Info("reading GoBGP counters", "peer", name, "error", err.Error())
		}
		out[name] = c
	}
	return out
}

package e2e

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// vipPoller is the lab's client: it asks GET /readyz at the VIP every 15 ms, as a client that
// knows only the VIP, and keeps every answer's outcome.
type vipPoller struct {
	mu    sync.Mutex
	polls []pollResult
}

type pollResult struct {
	at  time.Time // when the answer (or the failure) came
	err string    // "" for a 200
}

// pollVIP starts polling through c until ctx ends.
func pollVIP(ctx context.Context, c *http.Client, vip netip.Addr) *vipPoller {
	p := &vipPoller{}
	url := "https://" + netip.AddrPortFrom(vip, 6443).String() + "/readyz"
	go func() {
		tick := time.NewTicker(15 * time.Millisecond)
		defer tick.Stop()
		for {
			p.record(pollOnce(ctx, c, url))
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func pollOnce(ctx context.Context, c *http.Client, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := c.Do(req)
	if err != nil {
		return err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.Status
	}
	return ""
}

func (p *vipPoller) record(err string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.polls = append(p.polls, pollResult{at: time.Now(), err: err})
}

// answeredSince reports whether a poll succeeded after t.
func (p *vipPoller) answeredSince(t time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.polls) - 1; i >= 0 && p.polls[i].at.After(t); i-- {
		if p.polls[i].err == "" {
			return true
		}
	}
	return false
}

// outage is the client's longest failed interval in a window: from the last answer before a
// run of failures to the first answer after it.
type outage struct {
	longest time.Duration
	// between is the longest time from one answer to the next, failed or not: a request that
	// waits (its TCP segments lost until the new owner's announcement moves the client, then
	// retried by the transport on a new connection) fails no poll but shows here.
	between  time.Duration
	failures int    // failed polls in the window
	first    string // the first failure's error
	polls    int
	timeouts int // failed polls that waited their whole time: no answer, not even a refusal
}

// outageBetween measures the window [from, to]; the answer just before from opens it.
func (p *vipPoller) outageBetween(from, to time.Time) outage {
	p.mu.Lock()
	defer p.mu.Unlock()
	var o outage
	var lastOK time.Time
	failing := false
	for _, r := range p.polls {
		if r.at.After(to) {
			break
		}
		if !r.at.Before(from) {
			o.polls++
		}
		if r.err == "" {
			if !lastOK.IsZero() && r.at.After(from) {
				o.between = max(o.between, r.at.Sub(lastOK))
			}
			if failing && !lastOK.IsZero() && r.at.After(from) {
				o.longest = max(o.longest, r.at.Sub(lastOK))
			}
			lastOK, failing = r.at, false
			continue
		}
		if r.at.Before(from) {
			continue
		}
		failing = true
		o.failures++
		if strings.Contains(r.err, "Client.Timeout exceeded") {
			o.timeouts++
		}
		if o.first == "" {
			o.first = r.err
		}
	}
	return o
}

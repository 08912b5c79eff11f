package cluster_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
)

// keepAliveConns is how many long-lived connections the bench's probe keeps open beside its
// new connection every 10 ms (PORTICO_BENCH_CLUSTER_CONNS, default 50).
func keepAliveConns() int {
	n := 50
	if v := os.Getenv("PORTICO_BENCH_CLUSTER_CONNS"); v != "" {
		fmt.Sscan(v, &n)
	}
	return n
}

// stallAfter is how long a keep-alive connection waits for an answer before it gives the
// connection up; an answer later than a second still counts as a failed request, as the new
// connections' 1 s timeout does, but the connection lived through.
const stallAfter = 10 * time.Second

// A connEnd is how a keep-alive connection was lost.
type connEnd int

const (
	connReset   connEnd = iota // ECONNRESET or EOF: the other end (or a node in between) closed it
	connStalled                // no answer within stallAfter
	connOther                  // another error (unreachable, say)
)

// howEnded sorts the error that ended an established connection.
func howEnded(err error) connEnd {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return connReset
	case errors.As(err, &ne) && ne.Timeout():
		return connStalled
	default:
		return connOther
	}
}

// keepAlive is one of the probe's long-lived HTTP/1.1 connections to addr (host:port): a GET
// every 10 ms on the same connection, each waiting for its answer. A lost connection is
// counted and dialled again at the next tick. It is written on the socket, not with
// net/http's client, which would silently retry a GET on a new connection when a kept-alive
// one breaks, and hide what is measured here.
func (p *probe) keepAlive(ns, addr, app string, i int) {
	defer p.wg.Done()
	req := []byte("GET / HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")
	var conn net.Conn
	var r *bufio.Reader
	closeConn := func() {
		p.mu.Lock()
		p.conns[i] = nil
		p.kaUp[i] = false
		p.mu.Unlock()
		_ = conn.Close()
		conn = nil
	}
	defer func() {
		if conn != nil {
			closeConn()
		}
	}()
	p.every10ms(func() bool {
		if conn == nil {
			err := netlab.In(ns, func() (err error) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				return err
			})
			if err != nil {
				p.keepAliveFailed(&p.kaDialFailed, err)
				return true
			}
			r = bufio.NewReader(conn)
			p.mu.Lock()
			p.conns[i] = conn
			p.mu.Unlock()
			if p.stopping() {
				return false // stop may have set the deadlines before this connection was listed
			}
		}
		start := time.Now()
		_ = conn.SetDeadline(start.Add(stallAfter))
		p.mu.Lock()
		p.kaSent[i] = start
		p.mu.Unlock()
		body, err := roundTrip(conn, r, req)
		p.mu.Lock()
		countedByStop := p.kaSent[i].IsZero()
		p.kaSent[i] = time.Time{}
		p.mu.Unlock()
		late := err == nil && (!answeredBy(body, app) || time.Since(start) > time.Second)
		if p.stopping() {
			if late && !countedByStop {
				p.keepAliveFailed(&p.kaLate, fmt.Errorf("%q after %s", body, time.Since(start).Round(time.Millisecond)))
			}
			return false // an error is stop's own deadline (a wait of over a second stop counted)
		}
		switch {
		case err != nil:
			p.connLost(howEnded(err), err)
			closeConn()
		case late:
			p.keepAliveFailed(&p.kaLate, fmt.Errorf("%q after %s", body, time.Since(start).Round(time.Millisecond)))
		default:
			p.mu.Lock()
			p.kaUp[i] = true
			p.mu.Unlock()
		}
		return true
	})
}

// roundTrip sends one request on conn and reads its answer from r.
func roundTrip(conn net.Conn, r *bufio.Reader, req []byte) (string, error) {
	if _, err := conn.Write(req); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return string(b), err
}

func (p *probe) stopping() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// keepAliveFailed counts a failed request of a keep-alive connection that lives on (late or
// wrong: kaLate) or was never dialled (kaDialFailed).
func (p *probe) keepAliveFailed(kind *int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.countFailed(kind, err)
}

// countFailed is keepAliveFailed with p.mu held.
func (p *probe) countFailed(kind *int, err error) {
	p.kaFailed++
	*kind++
	p.note("keep-alive", err)
}

// connLost counts a keep-alive connection lost, and its request as failed.
func (p *probe) connLost(how connEnd, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kaFailed++
	p.kaEnded[how]++
	p.note("keep-alive lost", err)
}

// keepAliveAnswering counts the keep-alive connections whose last request was answered.
func (p *probe) keepAliveAnswering() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, up := range p.kaUp {
		if up {
			n++
		}
	}
	return n
}

package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/portico-lb/portico/internal/netlab"
)

// datagrams is a client sending a numbered datagram every 10 ms on one connected UDP socket
// (one 5-tuple throughout, as a DNS client keeping its socket or a QUIC connection does) and
// noting which pod answered each.
type datagrams struct {
	c        net.Conn
	mu       sync.Mutex
	sent     int
	answered map[int]string // sequence number -> the pod that echoed it
	sentAt   map[int]time.Time
	rtt      time.Duration // the longest wait for one echo
	last     time.Time     // the latest reply
	gap      time.Duration // the longest time between two replies (the sender's stalls included)
	errs     []string      // read errors: an ICMP error on the connected socket
	stopped  chan struct{}
	wg       sync.WaitGroup
}

func sendDatagrams(t *testing.T, ns string, to netip.AddrPort) *datagrams {
	d := &datagrams{answered: map[int]string{}, sentAt: map[int]time.Time{}, stopped: make(chan struct{})}
	must(t, netlab.In(ns, func() (err error) {
		d.c, err = net.Dial("udp4", to.String())
		return err
	}))
	d.wg.Add(2)
	go d.send()
	go d.receive()
	t.Cleanup(d.stop)
	return d
}

func (d *datagrams) send() {
	defer d.wg.Done()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-d.stopped:
			return
		case <-tick.C:
		}
		d.mu.Lock()
		d.sentAt[seq] = time.Now()
		d.mu.Unlock()
		_, _ = d.c.Write([]byte(strconv.Itoa(seq)))
		d.mu.Lock()
		d.sent = seq + 1
		d.mu.Unlock()
	}
}

// receive reads the echoes ("<pod> <seq>") until the socket is closed.
func (d *datagrams) receive() {
	defer d.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, err := d.c.Read(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		d.mu.Lock()
		d.note(string(buf[:n]), err, time.Now())
		d.mu.Unlock()
	}
}

// note records one read: an echo, or an error (an ICMP error on the connected socket).
func (d *datagrams) note(reply string, err error, now time.Time) {
	pod, seq, _ := strings.Cut(reply, " ")
	i, bad := strconv.Atoi(seq)
	switch {
	case err != nil:
		d.errs = append(d.errs, err.Error())
	case bad != nil:
		d.errs = append(d.errs, fmt.Sprintf("reply %q", reply))
	default:
		d.answered[i] = pod
		d.rtt = max(d.rtt, now.Sub(d.sentAt[i]))
		if !d.last.IsZero() {
			d.gap = max(d.gap, now.Sub(d.last))
		}
		d.last = now
	}
}

// mark is the sequence number of the next datagram.
func (d *datagrams) mark() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sent
}

// answeredSince waits until n datagrams from from on have been answered.
func (d *datagrams) answeredSince(t *testing.T, from, n int, what string) {
	waitFor(t, what, 30*time.Second, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		got := 0
		for i := from; i < d.sent; i++ {
			if _, ok := d.answered[i]; ok {
				got++
			}
		}
		return got >= n
	})
}

// finish stops sending and waits up to 3 s for the replies still on their way (those that do
// not come count as unanswered).
func (d *datagrams) finish() {
	close(d.stopped)
	pollUntil(3*time.Second, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.answered) == d.sent
	})
	d.c.Close()
	d.wg.Wait()
}

func (d *datagrams) stop() {
	select {
	case <-d.stopped:
	default:
		d.finish()
	}
}

// leg reports datagrams [from, to): how many were sent, which went unanswered, and the pods
// that answered, in the order they first did.
func (d *datagrams) leg(from, to int) (sent int, lost []int, pods []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := from; i < to; i++ {
		switch pod, ok := d.answered[i]; {
		case !ok:
			lost = append(lost, i)
		case !slices.Contains(pods, pod):
			pods = append(pods, pod)
		}
	}
	return to - from, lost, pods
}

// TestDataplaneUDPSurvivesDrain sends a datagram every 10 ms on one UDP socket to a UDP
// Service's L2 address (real kube-proxy, one echo pod per node) while the address's owner is
// drained (cordoned, as kubectl drain does first) and the address moves to the next node, and
// back the same way, and counts the datagrams left unanswered. The hand-off picks up TCP
// only: the flow's datagrams reaching the new owner are a new flow there, which its
// kube-proxy translates afresh, perhaps to another pod; back on the owner, they meet the
// flow's entry there again.
func TestDataplaneUDPSurvivesDrain(t *testing.T) {
	inDataplaneLab(t, func(t *testing.T, e *dpEnv) {
		for _, p := range e.lab.Pods {
			stop, err := netlab.ServeUDPEcho(p.NS, p.Name, echoPort)
			must(t, err)
			t.Cleanup(func() { _ = stop() })
		}
		ip := e.served(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "udp-echo", Namespace: "default"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "gitea"},
				Ports: []corev1.ServicePort{{Name: "echo", Protocol: corev1.ProtocolUDP, Port: echoPort, TargetPort: intstr.FromInt32(echoPort)}}}})
		owner, next := ownerAndNext(ip)
		e.expectOwner(ip, owner)
		d := sendDatagrams(t, e.Client.NS, netip.AddrPortFrom(ip, echoPort))
		d.answeredSince(t, 0, 50, "50 replies through "+owner)
		moved := d.mark()
		cordoned(true)(e.l2Env, owner)
		t.Cleanup(func() { cordoned(false)(e.l2Env, owner) })
		waitFor(t, "client's entry moves to "+next, 20*time.Second, func() bool {
			return netlab.Neighbour(e.Client.NS, ip) == e.macOf(next)
		})
		d.answeredSince(t, d.mark(), 50, "50 replies through "+next)
		back := d.mark()
		cordoned(false)(e.l2Env, owner)
		cordoned(true)(e.l2Env, next)
		t.Cleanup(func() { cordoned(false)(e.l2Env, next) })
		waitFor(t, "client's entry back to "+owner, 20*time.Second, func() bool {
			return netlab.Neighbour(e.Client.NS, ip) == e.macOf(owner)
		})
		d.answeredSince(t, d.mark(), 50, "50 replies through "+owner+" again")
		end := d.mark()
		d.finish()
		var lostAll []int
		for _, l := range []struct {
			what     string
			from, to int
		}{{"through " + owner, 0, moved}, {owner + " drained, to " + next, moved, back}, {"back to " + owner, back, end}} {
			sent, lost, pods := d.leg(l.from, l.to)
			t.Logf("%s: %d datagrams, %d unanswered %v, answered by %v", l.what, sent, len(lost), lost, pods)
			lostAll = append(lostAll, lost...)
		}
		sort.Strings(d.errs)
		t.Logf("in all: %d datagrams, %d unanswered, longest time between two replies %v, longest wait for one %v, %d read errors %v",
			end, len(lostAll), d.gap.Round(time.Millisecond), d.rtt.Round(time.Millisecond), len(d.errs), d.errs)
		if len(lostAll) > 0 || len(d.errs) > 0 {
			t.Errorf("%d of %d datagrams unanswered across the drain of %s and back (%v), read errors %v", len(lostAll), end, owner, lostAll, d.errs)
		}
		// Back on the owner, the flow meets the conntrack entry its first datagrams made there
		// (UDP's is kept 120 s after the last packet by default) and goes to the same pod again.
		if first, last := d.answered[0], d.answered[end-1]; first != last {
			t.Errorf("back through %s the flow was answered by %q, not by %s, which answered it there first", owner, last, first)
		}
	})
}

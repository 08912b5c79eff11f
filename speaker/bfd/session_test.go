package bfd

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestSessionTranscripts drives one Session through testdata/session/*: each command is an
// input at an explicit time, and the answer is what the session sent, how its state changed
// and when it wants to be woken next, in milliseconds since the session started.
func TestSessionTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/session", func(t *testing.T, path string) {
		var (
			s      *Session
			epoch  = time.Unix(1_700_000_000, 0)
			jitter = 1.0
		)
		at := func(d *datadriven.TestData) time.Time {
			var v string
			d.ScanArgs(t, "t", &v)
			return epoch.Add(duration(t, v))
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var out Output
			switch d.Cmd {
			case "new":
				var disc, seq uint64
				d.ScanArgs(t, "disc", &disc)
				if d.HasArg("seq") {
					d.ScanArgs(t, "seq", &seq)
				}
				next := uint32(disc) // each new discriminator is the last one plus one
				s = NewSession(epoch, config(t, d), uint32(disc), uint32(seq), Random{Jitter: func() float64 { return jitter },
					Discriminator: func() uint32 { next++; return next }})
			case "jitter":
				var v string
				d.ScanArgs(t, "fraction", &v)
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatal(err)
				}
				jitter = f
				return ""
			case "recv":
				p := packetArgs(t, d)
				var dropped *Discard
				if out, dropped = s.Receive(at(d), p); dropped != nil {
					return "discarded: " + dropped.Error() + "\n" + summary(s, epoch)
				}
			case "advance":
				out = s.Advance(at(d))
			case "reconfigure":
				out = s.Reconfigure(at(d), config(t, d))
			case "shutdown":
				out = s.Shutdown()
			case "decode":
				p, err := Unmarshal(hexBytes(t, d.Input))
				if err != nil {
					return err.Error()
				}
				if d.HasArg("secret") {
					var secret string
					d.ScanArgs(t, "secret", &secret)
					return fmt.Sprintf("%v\ndigest valid under %q: %v", p, secret, p.DigestValid(Key(secret)))
				}
				return p.String()
			default:
				t.Fatalf("unknown command %q", d.Cmd)
			}
			var b strings.Builder
			for _, p := range out.Send {
				fmt.Fprintf(&b, "send %v\n", p)
			}
			if tr := out.Transition; tr != nil {
				fmt.Fprintf(&b, "%v -> %v (%v)\n", tr.From, tr.To, tr.Diag)
			}
			b.WriteString(summary(s, epoch))
			return b.String()
		})
	})
}

func summary(s *Session, epoch time.Time) string {
	since := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Sub(epoch).String()
	}
	return fmt.Sprintf("state %v; next tx %s, detect %s\n", s.State(), since(s.nextTx), since(s.detectAt))
}

func duration(t *testing.T, v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func config(t *testing.T, d *datadriven.TestData) Config {
	c := Config{DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond, DetectMult: 3}
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "tx":
			c.DesiredMinTx = duration(t, a.Vals[0])
		case "rx":
			c.RequiredMinRx = duration(t, a.Vals[0])
		case "mult":
			n, _ := strconv.Atoi(a.Vals[0])
			c.DetectMult = uint8(n)
		case "passive":
			c.Passive = true
		case "auth":
			c.Auth.Type = authType(t, a.Vals[0])
		case "keyid":
			n, _ := strconv.Atoi(a.Vals[0])
			c.Auth.KeyID = uint8(n)
		case "secret":
			c.Auth.Key = Key(a.Vals[0])
		}
	}
	return c
}

func authType(t *testing.T, name string) AuthType {
	for _, a := range []AuthType{AuthNone, AuthKeyedSHA1, AuthMeticulousKeyedSHA1} {
		if a.String() == name {
			return a
		}
	}
	t.Fatalf("unknown authentication type %q", name)
	return 0
}

// packetArgs reads a packet from the peer: state=, my=, your=, tx=, rx=, mult=, P, F, and for
// an authenticated one auth=, keyid=, seq= and secret= (the key it is signed with).
func packetArgs(t *testing.T, d *datadriven.TestData) Packet {
	p := Packet{State: Down, DetectMult: 3, DesiredMinTx: time.Second, RequiredMinRx: time.Second}
	var secret Key
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "state":
			for st := AdminDown; st <= Up; st++ {
				if st.String() == a.Vals[0] {
					p.State = st
				}
			}
		case "my", "your", "mult":
			n, err := strconv.ParseUint(a.Vals[0], 10, 32)
			if err != nil {
				t.Fatal(err)
			}
			switch a.Key {
			case "my":
				p.MyDiscriminator = uint32(n)
			case "your":
				p.YourDiscriminator = uint32(n)
			default:
				p.DetectMult = uint8(n)
			}
		case "tx":
			p.DesiredMinTx = duration(t, a.Vals[0])
		case "rx":
			p.RequiredMinRx = duration(t, a.Vals[0])
		case "P":
			p.Poll = true
		case "F":
			p.Final = true
		case "auth":
			p.Auth.Type = authType(t, a.Vals[0])
		case "keyid", "seq":
			n, err := strconv.ParseUint(a.Vals[0], 10, 32)
			if err != nil {
				t.Fatal(err)
			}
			if a.Key == "keyid" {
				p.Auth.KeyID = uint8(n)
			} else {
				p.Auth.Sequence = uint32(n)
			}
		case "secret":
			secret = Key(a.Vals[0])
		}
	}
	if p.Auth.Type != AuthNone {
		p = p.Signed(secret)
	}
	return p
}

func hexBytes(t *testing.T, s string) []byte {
	var b []byte
	for _, f := range strings.Fields(s) {
		n, err := strconv.ParseUint(f, 16, 8)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, byte(n))
	}
	return b
}

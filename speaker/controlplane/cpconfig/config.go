// Package cpconfig reads the control-plane mode's configuration: the address of the Kubernetes
// API that the control-plane nodes hold among themselves (the VIP), where they gossip and how
// each checks its own apiserver. It is a local file, read before any apiserver exists; it is
// pure (Parse takes the file's bytes), so a bad file is refused with every problem named before
// the speaker opens a socket.
package cpconfig

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Config is the control-plane mode's configuration.
type Config struct {
	// VIP is the address clients reach the Kubernetes API at (kubeadm's
	// --control-plane-endpoint): one node at a time answers for it.
	VIP netip.Addr `json:"vip"`
	// Interface is where the VIP is answered (ARP/NDP); empty: the node's suitable interfaces,
	// those whose subnet holds the VIP first (as for Services).
	Interface string `json:"interface,omitempty"`
	// GossipPort is the members' memberlist port (UDP and TCP), the same on every node.
	GossipPort int `json:"gossipPort,omitempty"`
	// Members are the control-plane nodes; this node is one of them (--node-name).
	Members []Member `json:"members"`
	// Readyz says how each node checks its own apiserver: it may hold the VIP only while that
	// answers.
	Readyz Readyz `json:"readyz"`
	// BGPPeers, when set, are the routers the VIP is advertised to.
	BGPPeers []BGPPeer `json:"bgpPeers,omitempty"`
}

// Member is one control-plane node: its name and the address its speaker gossips from.
type Member struct {
	Name    string     `json:"name"`
	Address netip.Addr `json:"address"`
}

// Readyz is the check of the node's own apiserver: GET URL over TLS, trusting CA, every Interval,
// each given Timeout; Failures failures in a row make the node ineligible, Successes successes in
// a row make it eligible again.
type Readyz struct {
	URL       string   `json:"url"`
	CA        string   `json:"ca"`
	Interval  Duration `json:"interval,omitempty"`
	Timeout   Duration `json:"timeout,omitempty"`
	Failures  int      `json:"failures,omitempty"`
	Successes int      `json:"successes,omitempty"`
}

// BGPPeer is a router the VIP is advertised to.
type BGPPeer struct {
	Address netip.Addr `json:"address"`
	ASN     uint32     `json:"asn"`
	MyASN   uint32     `json:"myASN"`
}

// Defaults fill what the file leaves out: a killed apiserver (connection refused at once) makes
// its node ineligible within Failures × Interval, 300 ms; one that comes back (or starts) is
// trusted after half a second of answers.
var Defaults = Readyz{Interval: Duration(100 * time.Millisecond), Timeout: Duration(time.Second), Failures: 3, Successes: 5}

// DefaultGossipPort is the members' memberlist port when the file names none: not the Services
// speakers' 7946, so both may run on one node.
const DefaultGossipPort = 7947

// Limits on the hysteresis: a node takes at most this many checks to leave or return.
const maxChecks = 100

// Parse reads a configuration file's bytes, fills the defaults and checks it; the error names
// every problem found.
func Parse(data []byte) (Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return Config{}, fmt.Errorf("control-plane configuration: %w", err)
	}
	c.fill()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func (c *Config) fill() {
	if c.GossipPort == 0 {
		c.GossipPort = DefaultGossipPort
	}
	r := &c.Readyz
	r.Interval = orDefault(r.Interval, Defaults.Interval)
	r.Timeout = orDefault(r.Timeout, Defaults.Timeout)
	if r.Failures == 0 {
		r.Failures = Defaults.Failures
	}
	if r.Successes == 0 {
		r.Successes = Defaults.Successes
	}
}

func orDefault(d, def Duration) Duration {
	if d == 0 {
		return def
	}
	return d
}

// Validate names every problem of c, nil when there is none.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case !c.VIP.IsValid():
		bad("vip: missing")
	case c.VIP.IsUnspecified() || c.VIP.IsLoopback() || c.VIP.IsMulticast() || c.VIP.Zone() != "":
		bad("vip: %s cannot be answered for on a link", c.VIP)
	}
	if c.GossipPort < 1 || c.GossipPort > 65535 {
		bad("gossipPort: %d is not a port", c.GossipPort)
	}
	errs = append(errs, c.validateMembers()...)
	errs = append(errs, c.Readyz.validate()...)
	for i, p := range c.BGPPeers {
		if !p.Address.IsValid() {
			bad("bgpPeers[%d].address: missing", i)
		}
		if p.ASN == 0 || p.MyASN == 0 {
			bad("bgpPeers[%d]: asn and myASN must be set", i)
		}
	}
	return errors.Join(errs...)
}

func (c Config) validateMembers() []error {
	var errs []error
	if len(c.Members) == 0 {
		errs = append(errs, errors.New("members: none (list every control-plane node, this one included)"))
	}
	names := map[string]bool{}
	addrs := map[netip.Addr]bool{}
	for i, m := range c.Members {
		switch {
		case m.Name == "":
			errs = append(errs, fmt.Errorf("members[%d].name: missing", i))
		case names[m.Name]:
			errs = append(errs, fmt.Errorf("members[%d].name: %s listed twice", i, m.Name))
		}
		switch {
		case !m.Address.IsValid():
			errs = append(errs, fmt.Errorf("members[%d].address: missing", i))
		case addrs[m.Address]:
			errs = append(errs, fmt.Errorf("members[%d].address: %s listed twice", i, m.Address))
		case m.Address == c.VIP:
			errs = append(errs, fmt.Errorf("members[%d].address: %s is the vip; a member gossips from its own address", i, m.Address))
		}
		names[m.Name], addrs[m.Address] = true, true
	}
	return errs
}

func (r Readyz) validate() []error {
	var errs []error
	u, err := url.Parse(r.URL)
	switch {
	case r.URL == "":
		errs = append(errs, errors.New("readyz.url: missing (this node's apiserver, e.g. https://127.0.0.1:6443/readyz)"))
	case err != nil:
		errs = append(errs, fmt.Errorf("readyz.url: %w", err))
	case u.Scheme != "https" || u.Host == "":
		errs = append(errs, fmt.Errorf("readyz.url: %q is not an https URL (the check is over TLS)", r.URL))
	}
	if r.CA == "" {
		errs = append(errs, errors.New("readyz.ca: missing (the CA that signed the apiserver's serving certificate, e.g. /etc/kubernetes/pki/ca.crt)"))
	}
	if r.Interval <= 0 || r.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("readyz: interval %s and timeout %s must be positive", r.Interval, r.Timeout))
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"failures", r.Failures}, {"successes", r.Successes}} {
		if n.v < 1 || n.v > maxChecks {
			errs = append(errs, fmt.Errorf("readyz.%s: %d, want 1 to %d", n.name, n.v, maxChecks))
		}
	}
	return errs
}

// Self is the member named node, false when the file does not list it.
func (c Config) Self(node string) (Member, bool) {
	i := slices.IndexFunc(c.Members, func(m Member) bool { return m.Name == node })
	if i < 0 {
		return Member{}, false
	}
	return c.Members[i], true
}

// Names are the members' names, sorted.
func (c Config) Names() []string {
	out := make([]string, 0, len(c.Members))
	for _, m := range c.Members {
		out = append(out, m.Name)
	}
	slices.Sort(out)
	return out
}

// Duration is a time.Duration written as Go writes it ("200ms", "1s").
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as "200ms".
func (d Duration) MarshalJSON() ([]byte, error) { return []byte(`"` + d.String() + `"`), nil }

// UnmarshalJSON reads "200ms".
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (e.g. 200ms, 1s)", s)
	}
	*d = Duration(v)
	return nil
}

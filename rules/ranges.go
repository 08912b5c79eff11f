package rules

import (
	"cmp"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// Range is an inclusive range of addresses of one family.
type Range struct {
	First, Last netip.Addr
}

// ParseRange parses one pool entry: a CIDR naming its network ("10.0.0.192/28") or two
// addresses of one family joined by a dash ("10.0.0.200-10.0.0.215", spaces allowed). It
// accepts exactly what the CRD's CEL rules accept, and also checks what CEL cannot: that an
// IPv6 range starts before it ends, and that a range holds no special address between its
// ends. Zones and IPv4-mapped IPv6 addresses are refused.
func ParseRange(s string) (Range, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Addr().Is4In6() {
			return Range{}, errShape
		}
		if p != p.Masked() {
			return Range{}, fmt.Errorf("CIDR has host bits set: its network is %s", p.Masked())
		}
		return notSpecial(prefixRange(p))
	}
	parts := strings.Split(s, "-")
	if len(parts) != 2 {
		return Range{}, errShape
	}
	first, err1 := parseAddr(strings.TrimSpace(parts[0]))
	last, err2 := parseAddr(strings.TrimSpace(parts[1]))
	if err1 != nil || err2 != nil {
		return Range{}, errShape
	}
	if first.Is4() != last.Is4() {
		return Range{}, errors.New("a range must not mix IPv4 and IPv6")
	}
	if last.Less(first) {
		return Range{}, fmt.Errorf("range start %s is after its end %s", first, last)
	}
	return notSpecial(Range{First: first, Last: last})
}

// SpecialBlocks are the IANA special-purpose blocks that can never be a LoadBalancer address,
// each group with the reason its error gives. The CRD's CEL rules on AddressRange refuse an
// entry that is in, ends in or (for a CIDR) holds one, with the same reason as their message
// (TestSpecialReasonsMatchTheCRD); a range running across one between ordinary ends is caught
// only here. Documentation (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32),
// benchmarking (198.18.0.0/15), shared (100.64.0.0/10) and private blocks stay allowed: a lab
// or a private network routes them like any other.
var SpecialBlocks = []struct {
	Blocks []netip.Prefix
	Reason string
}{
	{prefixes("0.0.0.0/8", "::/128"), "0.0.0.0/8 and :: mean this host on this network (RFC 1122, RFC 4291) and can never be a Service address"},
	{prefixes("127.0.0.0/8", "::1/128"), "127.0.0.0/8 and ::1 are loopback (RFC 1122, RFC 4291), reachable only inside each host, and can never be a Service address"},
	{prefixes("169.254.0.0/16", "fe80::/10"), "169.254.0.0/16 and fe80::/10 are link-local (RFC 3927, RFC 4291), never routed off their link, and can never be a Service address"},
	{prefixes("224.0.0.0/4", "ff00::/8"), "224.0.0.0/4 and ff00::/8 are multicast (RFC 5771, RFC 4291), groups rather than hosts, and can never be a Service address"},
	{prefixes("240.0.0.0/4"), "240.0.0.0/4 is reserved for future use (RFC 1112) and ends with the broadcast address 255.255.255.255 (RFC 919): it can never be a Service address"},
}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// notSpecial refuses a range that holds any address of SpecialBlocks.
func notSpecial(r Range) (Range, error) {
	for _, g := range SpecialBlocks {
		for _, b := range g.Blocks {
			if r.Overlaps(prefixRange(b)) {
				return Range{}, fmt.Errorf("holds %s: %s", b, g.Reason)
			}
		}
	}
	return r, nil
}

var errShape = errors.New("must be a CIDR such as 10.0.0.0/24 or 2001:db8::/120, or a range such as 10.0.0.200-10.0.0.215")

func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || a.Is4In6() {
		return netip.Addr{}, errShape
	}
	return a, nil
}

// prefixRange is the range a masked prefix covers.
func prefixRange(p netip.Prefix) Range {
	last := p.Addr().AsSlice()
	for bit := p.Bits(); bit < len(last)*8; bit++ {
		last[bit/8] |= 0x80 >> (bit % 8)
	}
	l, _ := netip.AddrFromSlice(last)
	return Range{First: p.Addr(), Last: l}
}

// Is4 reports whether the range holds IPv4 addresses.
func (r Range) Is4() bool { return r.First.Is4() }

// Contains reports whether a is in the range.
func (r Range) Contains(a netip.Addr) bool {
	return a.Is4() == r.Is4() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// Size is the number of addresses in the range.
func (r Range) Size() *big.Int {
	first, last := new(big.Int).SetBytes(r.First.AsSlice()), new(big.Int).SetBytes(r.Last.AsSlice())
	return last.Sub(last, first).Add(last, big.NewInt(1))
}

// Overlaps reports whether the two ranges share an address.
func (r Range) Overlaps(o Range) bool {
	return r.Is4() == o.Is4() && r.First.Compare(o.Last) <= 0 && o.First.Compare(r.Last) <= 0
}

// String prints the range as a CIDR when it is exactly one, else as "first-last".
func (r Range) String() string {
	if p, ok := r.prefix(); ok {
		return p.String()
	}
	return r.First.String() + "-" + r.Last.String()
}

func (r Range) prefix() (netip.Prefix, bool) {
	for bits := 0; bits <= r.First.BitLen(); bits++ {
		p := netip.PrefixFrom(r.First, bits)
		if p.Masked().Addr() == r.First && prefixRange(p).Last == r.Last {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// EntryError is a problem with one entry of a pool's address list.
type EntryError struct {
	Index int    // position in spec.addresses
	Entry string // the entry as written
	Err   error
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("addresses[%d] %q: %v", e.Index, e.Entry, e.Err)
}

// ParsePool parses a pool's address list. It returns the ranges of the valid entries and one
// EntryError per invalid entry or per entry that overlaps an earlier one.
func ParsePool(entries []string) ([]Range, []error) {
	type indexed struct {
		Range
		i int
	}
	var ok []indexed
	var errs []error
	for i, e := range entries {
		r, err := ParseRange(e)
		if err != nil {
			errs = append(errs, &EntryError{Index: i, Entry: e, Err: err})
			continue
		}
		ok = append(ok, indexed{r, i})
	}
	// Sorted by family then start, an entry overlaps an earlier one exactly when it starts
	// before the furthest end reached so far in its family.
	sorted := slices.Clone(ok)
	slices.SortFunc(sorted, func(a, b indexed) int {
		return cmp.Or(cmp.Compare(a.First.BitLen(), b.First.BitLen()), a.First.Compare(b.First), a.i-b.i)
	})
	var reach *indexed
	reported := map[int]bool{} // one overlap error per entry is enough to act on
	for k := range sorted {
		cur := &sorted[k]
		if reach != nil && reach.Is4() == cur.Is4() && cur.First.Compare(reach.Last) <= 0 {
			a, b := reach, cur
			if b.i < a.i {
				a, b = b, a
			}
			if !reported[b.i] {
				reported[b.i] = true
				errs = append(errs, &EntryError{Index: b.i, Entry: entries[b.i],
					Err: fmt.Errorf("overlaps addresses[%d] %q", a.i, entries[a.i])})
			}
		}
		if reach == nil || reach.Is4() != cur.Is4() || cur.Last.Compare(reach.Last) > 0 {
			reach = cur
		}
	}
	slices.SortStableFunc(errs, func(a, b error) int {
		var ea, eb *EntryError
		errors.As(a, &ea)
		errors.As(b, &eb)
		return ea.Index - eb.Index
	})
	ranges := make([]Range, len(ok))
	for i, r := range ok {
		ranges[i] = r.Range
	}
	return ranges, errs
}

// PoolRanges parses an IPAddressPool's spec.addresses (ParsePool).
func PoolRanges(p *v1alpha1.IPAddressPool) ([]Range, []error) {
	entries := make([]string, len(p.Spec.Addresses))
	for i, a := range p.Spec.Addresses {
		entries[i] = string(a)
	}
	return ParsePool(entries)
}

package l2

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ReadLinks reads this network namespace's links, with their kinds, masters and addresses,
// from the kernel over netlink, sorted by name.
func ReadLinks() ([]Link, error) {
	links, err := retryInterrupted(func() ([]netlink.Link, error) { return netlink.LinkList() })
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	addrs, err := retryInterrupted(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	prefixes := map[int][]netip.Prefix{}
	for _, a := range addrs {
		if a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		ones, _ := a.Mask.Size()
		if ok {
			prefixes[a.LinkIndex] = append(prefixes[a.LinkIndex], netip.PrefixFrom(ip.Unmap(), ones).Masked())
		}
	}
	out := make([]Link, 0, len(links))
	for _, l := range links {
		at := l.Attrs()
		out = append(out, Link{Name: at.Name, Kind: l.Type(),
			Up:        at.RawFlags&unix.IFF_UP != 0,
			Broadcast: at.RawFlags&unix.IFF_BROADCAST != 0,
			Loopback:  at.RawFlags&unix.IFF_LOOPBACK != 0,
			NoARP:     at.RawFlags&unix.IFF_NOARP != 0,
			NoCarrier: at.RawFlags&unix.IFF_UP != 0 && at.RawFlags&unix.IFF_LOWER_UP == 0,
			MAC:       at.HardwareAddr,
			Master:    names[at.MasterIndex],
			Prefixes:  prefixes[at.Index],
		})
	}
	slices.SortFunc(out, func(a, b Link) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// retryInterrupted repeats a netlink dump that the kernel interrupted (links changed while it
// was read, as they do while pods start) a few times before taking its partial answer.
func retryInterrupted[T any](dump func() ([]T, error)) ([]T, error) {
	var out []T
	var err error
	for range 3 {
		if out, err = dump(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return out, nil
}

// Suitable lists the interfaces that answer when an advertisement names none (see Decide).
func Suitable() ([]string, error) {
	links, err := ReadLinks()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, v := range Decide(links) {
		if v.Answers {
			names = append(names, v.Name)
		}
	}
	return names, nil
}

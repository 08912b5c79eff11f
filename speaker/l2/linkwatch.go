package l2

import (
	"context"
	"fmt"

	"github.com/vishvananda/netlink"
)

// WatchLinks calls changed after the kernel reports a change to a link (carrier, up or down,
// created or deleted) or an address of this network namespace, until ctx ends; updates that
// arrive together are told once, and once as soon as it listens, so that a change between a
// first read of the links and the subscription is not missed. It returns when it cannot
// subscribe.
func WatchLinks(ctx context.Context, changed func()) error {
	done := make(chan struct{})
	defer close(done)
	links := make(chan netlink.LinkUpdate, 64)
	addrs := make(chan netlink.AddrUpdate, 64)
	if err := netlink.LinkSubscribe(links, done); err != nil {
		return fmt.Errorf("watching links: %w", err)
	}
	if err := netlink.AddrSubscribe(addrs, done); err != nil {
		return fmt.Errorf("watching addresses: %w", err)
	}
	changed()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-links:
			if !ok {
				return fmt.Errorf("the kernel closed the link watch")
			}
		case _, ok := <-addrs:
			if !ok {
				return fmt.Errorf("the kernel closed the address watch")
			}
		}
		drainUpdates(links, addrs)
		changed()
	}
}

// drainUpdates takes the updates already queued: one read of the links covers them all.
func drainUpdates(links chan netlink.LinkUpdate, addrs chan netlink.AddrUpdate) {
	for {
		select {
		case <-links:
		case <-addrs:
		default:
			return
		}
	}
}

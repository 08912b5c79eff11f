package main

import (
	"net/netip"
	"testing"
)

// TestOnNode: a port alone binds to the node's address (IPv6 in brackets); an address with a
// host, a wildcard included, and "0" (off) are kept.
func TestOnNode(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
	for _, tc := range []struct {
		addr string
		node netip.Addr
		want string
	}{
		{":7474", v4, "192.0.2.10:7474"},
		{":7475", v6, "[2001:db8::10]:7475"},
		{"0.0.0.0:7474", v4, "0.0.0.0:7474"},
		{"[::]:7474", v6, "[::]:7474"},
		{"127.0.0.1:9000", v4, "127.0.0.1:9000"},
		{"0", v4, "0"},
	} {
		if got, err := onNode(tc.addr, tc.node); err != nil || got != tc.want {
			t.Errorf("onNode(%q, %s) = %q, %v; want %q", tc.addr, tc.node, got, err, tc.want)
		}
	}
	if _, err := onNode("7474", v4); err == nil {
		t.Error("a port without a colon was accepted")
	}
}

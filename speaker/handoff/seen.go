package handoff

import (
	"fmt"
	"slices"

	"github.com/google/nftables"
)

// SeenMarks reads the rules of the node that use marks (RuleMarkBits): every chain of every
// nftables table (iptables-nft's too) but own, Portico's tables in family inet, and every
// policy-routing rule with a fwmark but the hand-off's own (Config.owns). It needs
// CAP_NET_ADMIN in the node's network namespace.
func (c Config) SeenMarks(own ...string) ([]MarkUse, error) {
	conn, err := nftables.New()
	if err != nil {
		return nil, err
	}
	chains, err := conn.ListChains()
	if err != nil {
		return nil, fmt.Errorf("listing the nftables chains: %w", err)
	}
	var uses []MarkUse
	for _, ch := range chains {
		if ch.Table.Family == nftables.TableFamilyINet && slices.Contains(own, ch.Table.Name) {
			continue
		}
		rules, err := conn.GetRules(ch.Table, ch)
		if err != nil {
			return nil, fmt.Errorf("reading the rules of table %s chain %s: %w", ch.Table.Name, ch.Name, err)
		}
		var used uint32
		for _, r := range rules {
			used |= RuleMarkBits(r.Exprs)
		}
		if used != 0 {
			uses = append(uses, MarkUse{Where: fmt.Sprintf("table %s %s chain %s", familyName(ch.Table.Family), ch.Table.Name, ch.Name), Bits: used})
		}
	}
	rules, err := listRules()
	if err != nil {
		return nil, err
	}
	for _, r := range rules {
		if r.FwMark == 0 && r.FwMask == 0 || c.owns(r) {
			continue
		}
		bits := r.FwMask
		if bits == 0 || bits == allBits { // an exact fwmark: its value's bits
			bits = r.FwMark
		}
		uses = append(uses, MarkUse{Where: "ip rule " + r.String(), Bits: bits})
	}
	return uses, nil
}

func familyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyARP:
		return "arp"
	case nftables.TableFamilyBridge:
		return "bridge"
	case nftables.TableFamilyNetdev:
		return "netdev"
	}
	return fmt.Sprint(f)
}

package handoff

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
)

// The hand-off needs bits of the mark that no other software on the node uses: a packet that
// another rule marks with the hand-off bit would be routed by the hand-off's rules, and a rule
// that reads the bits the hand-off sets would misjudge the flows it hands off. So before it
// starts, the speaker reads the node's other rules (every nftables table but Portico's, which
// iptables-nft's rules are too, and the policy-routing rules; SeenMarks) and checks the bits it
// is given against theirs (CheckMarks). It cannot see what is not a rule there: eBPF programs
// (Cilium's datapath writes a pod's whole mark), iptables-legacy's rules.

// MarkUse is a rule of the node's (a chain's rules, or a policy-routing rule) that reads or
// sets bits of the packet or connection mark.
type MarkUse struct {
	Where string // "table ip mangle chain PREROUTING", "ip rule 9"
	Bits  uint32
}

// MarkCheck is what CheckMarks decides: whether the hand-off may run (its bit is no other
// rule's), whether it may hand off by flow too (nor are its slot bits), with the rules in the
// way and the bits no rule seen uses.
type MarkCheck struct {
	Handoff, Flows bool
	MarkUsers      []MarkUse // the rules using the hand-off bit
	SlotUsers      []MarkUse // the rules using a slot bit
	Free           uint32
}

// maxUsersNamed bounds the rules a check names (kube-proxy alone has thousands).
const maxUsersNamed = 4

// CheckMarks decides whether the hand-off of c may run beside the rules that use uses, by rule:
// not at all when one uses the hand-off bit, by address only when one uses a slot bit (or c has
// none).
func (c Config) CheckMarks(uses []MarkUse) MarkCheck {
	byWhere := map[string]uint32{}
	var used uint32
	for _, u := range uses {
		byWhere[u.Where] |= u.Bits
		used |= u.Bits
	}
	check := MarkCheck{Free: ^used}
	for _, where := range slices.Sorted(maps.Keys(byWhere)) {
		b := byWhere[where]
		if b&c.Mark != 0 {
			check.MarkUsers = append(check.MarkUsers, MarkUse{where, b})
		}
		if b&c.SlotMask != 0 {
			check.SlotUsers = append(check.SlotUsers, MarkUse{where, b})
		}
	}
	check.Handoff = len(check.MarkUsers) == 0
	check.Flows = check.Handoff && c.SlotMask != 0 && len(check.SlotUsers) == 0
	return check
}

// Message says the check's verdict for a condition or an event.
func (m MarkCheck) Message(c Config) string {
	free := fmt.Sprintf("bits no rule of the node uses: %#08x", m.Free)
	switch {
	case !m.Handoff:
		return fmt.Sprintf("the hand-off bit %#x (--l2-handoff-mark) is used by %s: no connection is handed off when an address moves; give a free bit (%s)",
			c.Mark, namedUsers(m.MarkUsers), free)
	case c.SlotMask == 0:
		return fmt.Sprintf("the hand-off bit %#x is used by no other rule of the node; no slot bits (--handoff-slot-mask=0): BGP flow sharing is off", c.Mark)
	case !m.Flows:
		return fmt.Sprintf("the slot bits %#x (--handoff-slot-mask) are used by %s: connections are handed off when an L2 address moves (the hand-off bit %#x is free), but BGP flow sharing is off; give free contiguous bits (%s)",
			c.SlotMask, namedUsers(m.SlotUsers), c.Mark, free)
	}
	return fmt.Sprintf("the hand-off bit %#x and the slot bits %#x are used by no other rule of the node", c.Mark, c.SlotMask)
}

func namedUsers(users []MarkUse) string {
	var names []string
	for _, u := range users[:min(len(users), maxUsersNamed)] {
		names = append(names, fmt.Sprintf("%s (%#x)", u.Where, u.Bits))
	}
	if len(users) > maxUsersNamed {
		names = append(names, fmt.Sprintf("%d more", len(users)-maxUsersNamed))
	}
	return strings.Join(names, ", ")
}

const allBits = ^uint32(0)

// register is what a rule's register holds, as far as marks go: a mark loaded (meta or ct),
// then masked and xored, or a constant.
type register struct {
	mark      expr.CtKey // expr.CtKeyMARK for the connection's, metaKey for the packet's; 0: no mark
	mask, xor uint32
	constant  bool
}

// metaKey stands for the packet mark in register.mark (apart from every CtKey).
const metaKey expr.CtKey = 1 << 16

// RuleMarkBits returns the bits of the packet and connection mark a rule's expressions read
// (compared or looked up: their mask, or the compared value's bits for an exact compare) or may
// set (the value set, and the bits a partial write clears: a rule that clears bits owns them; an
// assignment of the whole mark owns only the bits it sets; a copy from the other mark owns the
// bits it copies). xtables' mark, connmark, MARK, CONNMARK and TPROXY (iptables-nft's) count
// the same way.
func RuleMarkBits(exprs []expr.Any) uint32 {
	regs := map[uint32]register{}
	var used uint32
	for _, e := range exprs {
		switch e := e.(type) {
		case *expr.Meta:
			used |= access(regs, e.Key == expr.MetaKeyMARK, metaKey, e.Register, e.SourceRegister)
		case *expr.Ct:
			used |= access(regs, e.Key == expr.CtKeyMARK, expr.CtKeyMARK, e.Register, e.SourceRegister)
		case *expr.Immediate:
			if len(e.Data) == 4 {
				regs[e.Register] = register{constant: true, xor: binary.NativeEndian.Uint32(e.Data)}
			}
		case *expr.Bitwise:
			r := regs[e.SourceRegister]
			if len(e.Mask) == 4 && len(e.Xor) == 4 {
				m, x := binary.NativeEndian.Uint32(e.Mask), binary.NativeEndian.Uint32(e.Xor)
				r.mask, r.xor = r.mask&m, r.xor&m^x
			}
			regs[e.DestRegister] = r
		case *expr.Cmp:
			if r := regs[e.Register]; r.mark != 0 && r.mask == allBits && len(e.Data) == 4 {
				used |= binary.NativeEndian.Uint32(e.Data) // an exact compare: its value's bits
			} else if r.mark != 0 {
				used |= r.mask
			}
		case *expr.Lookup:
			if r := regs[e.SourceRegister]; r.mark != 0 {
				used |= r.mask
			}
		case *expr.Match:
			used |= xtMatchBits(e.Name, e.Info)
		case *expr.Target:
			used |= xtTargetBits(e.Name, e.Info)
		}
	}
	return used
}

// access loads a register from a mark (isMark) or stores one into it, and returns the bits a
// store may set; a load of anything else leaves a register that holds no mark.
func access(regs map[uint32]register, isMark bool, key expr.CtKey, reg uint32, store bool) uint32 {
	switch {
	case !store && isMark:
		regs[reg] = register{mark: key, mask: allBits}
	case !store:
		regs[reg] = register{}
	case isMark:
		return stored(regs[reg], key)
	}
	return 0
}

// stored is the bits a store of r into the mark key may set or owns.
func stored(r register, key expr.CtKey) uint32 {
	switch {
	case r.constant:
		return r.xor // an assignment
	case r.mark == 0:
		return allBits // from a packet's field, a map's value: any bit
	case r.mark != key:
		return r.mask | r.xor // a copy of the other mark
	case r.mask == 0:
		return r.xor
	}
	return ^r.mask | r.xor // the mark with bits cleared (owned) and toggled
}

// xtMatchBits: iptables' -m mark and -m connmark (xt_mark_mtinfo1, xt_connmark_mtinfo1:
// mark, mask, invert).
func xtMatchBits(name string, info xt.InfoAny) uint32 {
	b, ok := info.(*xt.Unknown)
	if !ok || len(*b) < 8 || name != "mark" && name != "connmark" {
		return 0
	}
	return binary.NativeEndian.Uint32((*b)[4:8])
}

// xtTargetBits: iptables' -j MARK (xt_mark_tginfo2: mark, mask), -j CONNMARK (xt_connmark_tginfo1:
// ctmark, ctmask, nfmask, mode) and -j TPROXY (xt_tproxy_target_info: mark mask, mark value).
func xtTargetBits(name string, info xt.InfoAny) uint32 {
	b, ok := info.(*xt.Unknown)
	if !ok || len(*b) < 8 {
		return 0
	}
	u := func(i int) uint32 { return binary.NativeEndian.Uint32((*b)[4*i : 4*i+4]) }
	owned := func(value, mask uint32) uint32 {
		if mask == allBits {
			return value
		}
		return value | mask
	}
	switch {
	case name == "MARK":
		return owned(u(0), u(1))
	case name == "TPROXY":
		return owned(u(1), u(0))
	case name == "CONNMARK" && len(*b) >= 13:
		if (*b)[12] == 0 { // --set-xmark
			return owned(u(0), u(1))
		}
		return u(1) & u(2) // --save-mark, --restore-mark: the bits copied
	}
	return 0
}

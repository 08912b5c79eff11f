package v1alpha1_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/rules"
)

var cp *controlplane.ControlPlane

// reason is the message the CRD's CEL rules (and the controller, rules.SpecialBlocks) give for
// an entry holding block.
func reason(block string) string {
	for _, g := range rules.SpecialBlocks {
		if slices.Contains(g.Blocks, netip.MustParsePrefix(block)) {
			return g.Reason
		}
	}
	panic("no special block " + block)
}

func TestMain(m *testing.M) { controlplane.Main(m, &cp) }

// Where a rule is enforced: the CRD's OpenAPI schema, a CEL rule in the CRD, or the
// apiserver's strict field validation. Rules CEL cannot express are enforced by the
// controller and tested in controller/ (docs/validation.md has the whole table).
const (
	schema = "schema"
	cel    = "CEL"
	strict = "strict"
)

type invalidCase struct {
	name  string
	where string
	kind  string
	spec  string   // YAML of .spec
	want  []string // substrings of the apiserver's rejection
}

var invalidCases = []invalidCase{
	// IPAddressPool
	{"pool: not an address", cel, "IPAddressPool", `addresses: [foo]`,
		[]string{"spec.addresses[0]", "must be a CIDR such as 10.0.0.0/24"}},
	{"pool: octet out of range in a CIDR", cel, "IPAddressPool", `addresses: [10.0.0.300/24]`,
		[]string{"spec.addresses[0]", "must be a CIDR"}},
	{"pool: bad end of a range", cel, "IPAddressPool", `addresses: [10.0.0.1-10.0.0.300]`,
		[]string{"spec.addresses[0]", "must be a CIDR"}},
	{"pool: three-part range", cel, "IPAddressPool", `addresses: [10.0.0.1-10.0.0.2-10.0.0.3]`,
		[]string{"spec.addresses[0]", "must be a CIDR"}},
	{"pool: the second entry is the bad one", cel, "IPAddressPool", `addresses: [10.0.0.0/24, 10.1.0.0/33]`,
		[]string{"spec.addresses[1]", "must be a CIDR"}},
	{"pool: IPv4 range start after end", cel, "IPAddressPool", `addresses: [10.0.0.215-10.0.0.200]`,
		[]string{"spec.addresses[0]", "range start 10.0.0.215 is after its end 10.0.0.200"}},
	{"pool: range mixes families", cel, "IPAddressPool", `addresses: [10.0.0.1-2001:db8::1]`,
		[]string{"spec.addresses[0]", "a range must not mix IPv4 and IPv6"}},
	{"pool: CIDR with host bits", cel, "IPAddressPool", `addresses: [10.0.0.200/28]`,
		[]string{"spec.addresses[0]", "CIDR has host bits set: write its network address"}},
	{"pool: IPv6 CIDR with host bits", cel, "IPAddressPool", `addresses: ["2001:db8::1/64"]`,
		[]string{"spec.addresses[0]", "CIDR has host bits set: write its network address"}},
	{"pool: IPv6 address with a zone", cel, "IPAddressPool", `addresses: ["fe80::1%eth0-fe80::5"]`,
		[]string{"spec.addresses[0]", "must be a CIDR"}},
	{"pool: IPv4-mapped IPv6", cel, "IPAddressPool", `addresses: ["::ffff:10.0.0.1/128"]`,
		[]string{"spec.addresses[0]", "must be a CIDR"}},
	{"pool: everything (0.0.0.0/0)", cel, "IPAddressPool", `addresses: [0.0.0.0/0]`,
		[]string{"spec.addresses[0]", reason("0.0.0.0/8"), reason("127.0.0.0/8"), reason("240.0.0.0/4")}},
	{"pool: IPv4 range from the unspecified address", cel, "IPAddressPool", `addresses: [0.0.0.0-10.0.0.5]`,
		[]string{"spec.addresses[0]", reason("0.0.0.0/8")}},
	{"pool: this network (0.0.0.0/8)", cel, "IPAddressPool", `addresses: [0.0.0.0/8]`,
		[]string{"spec.addresses[0]", reason("0.0.0.0/8")}},
	{"pool: range inside this network", cel, "IPAddressPool", `addresses: [0.0.0.1-0.0.0.9]`,
		[]string{"spec.addresses[0]", reason("0.0.0.0/8")}},
	{"pool: loopback range", cel, "IPAddressPool", `addresses: [127.0.0.1-127.0.0.9]`,
		[]string{"spec.addresses[0]", reason("127.0.0.0/8")}},
	{"pool: range ending at a link-local address", cel, "IPAddressPool", `addresses: [10.0.0.0-169.254.0.1]`,
		[]string{"spec.addresses[0]", reason("169.254.0.0/16")}},
	{"pool: multicast CIDR", cel, "IPAddressPool", `addresses: [224.0.0.0/4]`,
		[]string{"spec.addresses[0]", reason("224.0.0.0/4")}},
	{"pool: reserved (240.0.0.0/4)", cel, "IPAddressPool", `addresses: [240.0.0.0/4]`,
		[]string{"spec.addresses[0]", reason("240.0.0.0/4")}},
	{"pool: CIDR inside reserved", cel, "IPAddressPool", `addresses: [250.1.0.0/16]`,
		[]string{"spec.addresses[0]", reason("240.0.0.0/4")}},
	{"pool: range ending at the broadcast address", cel, "IPAddressPool", `addresses: [203.0.113.0-255.255.255.255]`,
		[]string{"spec.addresses[0]", reason("240.0.0.0/4")}},
	{"pool: the broadcast address", cel, "IPAddressPool", `addresses: [255.255.255.255/32]`,
		[]string{"spec.addresses[0]", reason("240.0.0.0/4")}},
	{"pool: CIDR around loopback", cel, "IPAddressPool", `addresses: [64.0.0.0/2]`,
		[]string{"spec.addresses[0]", reason("127.0.0.0/8")}},
	{"pool: CIDR inside link-local", cel, "IPAddressPool", `addresses: [169.254.10.0/24]`,
		[]string{"spec.addresses[0]", reason("169.254.0.0/16")}},
	{"pool: everything IPv6 (::/0)", cel, "IPAddressPool", `addresses: ["::/0"]`,
		[]string{"spec.addresses[0]", reason("::/128"), reason("::1/128"), reason("fe80::/10"), reason("ff00::/8")}},
	{"pool: IPv6 unspecified", cel, "IPAddressPool", `addresses: ["::/128"]`,
		[]string{"spec.addresses[0]", reason("::/128")}},
	{"pool: IPv6 loopback", cel, "IPAddressPool", `addresses: ["::1/128"]`,
		[]string{"spec.addresses[0]", reason("::1/128")}},
	{"pool: IPv6 link-local CIDR", cel, "IPAddressPool", `addresses: ["fe80::/64"]`,
		[]string{"spec.addresses[0]", reason("fe80::/10")}},
	{"pool: IPv6 multicast range", cel, "IPAddressPool", `addresses: ["ff02::1-ff02::2"]`,
		[]string{"spec.addresses[0]", reason("ff00::/8")}},
	{"pool: IPv6 CIDR around link-local and multicast", cel, "IPAddressPool", `addresses: ["8000::/1"]`,
		[]string{"spec.addresses[0]", reason("fe80::/10"), reason("ff00::/8")}},
	{"pool: IPv6 range ending at a link-local address", cel, "IPAddressPool", `addresses: ["2001:db8::-fe80::1"]`,
		[]string{"spec.addresses[0]", reason("fe80::/10")}},
	{"pool: the second entry is special", cel, "IPAddressPool", `addresses: [198.51.100.0/24, 127.0.0.0/8]`,
		[]string{"spec.addresses[1]", reason("127.0.0.0/8")}},
	{"pool: empty address list", schema, "IPAddressPool", `addresses: []`,
		[]string{"spec.addresses", "should have at least 1 items"}},
	{"pool: no address list", schema, "IPAddressPool", `autoAssign: true`,
		[]string{"spec.addresses", "Required value"}},
	{"pool: duplicate entry", schema, "IPAddressPool", `addresses: [10.0.0.0/24, 10.0.0.0/24]`,
		[]string{"spec.addresses[1]", "Duplicate value"}},
	{"pool: negative priority", schema, "IPAddressPool", "addresses: [10.0.0.0/24]\nserviceAllocation: {priority: -1}",
		[]string{"spec.serviceAllocation.priority", "greater than or equal to 0"}},
	{"pool: bad namespace name", schema, "IPAddressPool", "addresses: [10.0.0.0/24]\nserviceAllocation: {namespaces: [Not_A_Namespace]}",
		[]string{"spec.serviceAllocation.namespaces[0]", "should match"}},
	{"pool: autoAssign is not a boolean", schema, "IPAddressPool", "addresses: [10.0.0.0/24]\nautoAssign: sometimes",
		[]string{"spec.autoAssign", "must be of type boolean"}},
	{"pool: allowSharingAcrossNamespaces is not a boolean", schema, "IPAddressPool", "addresses: [10.0.0.0/24]\nallowSharingAcrossNamespaces: yes please",
		[]string{"spec.allowSharingAcrossNamespaces", "must be of type boolean"}},
	{"pool: conflictProbing neither Enabled nor Disabled", schema, "IPAddressPool", "addresses: [10.0.0.0/24]\nconflictProbing: off",
		[]string{"spec.conflictProbing", "Unsupported value"}},
	{"pool: addressHold of no time", cel, "IPAddressPool", "addresses: [10.0.0.0/24]\naddressHold: {duration: 0s}",
		[]string{"spec.addressHold.duration", "addressHold.duration must be between 1s and 168h"}},
	{"pool: addressHold longer than a week", cel, "IPAddressPool", "addresses: [10.0.0.0/24]\naddressHold: {duration: 200h}",
		[]string{"spec.addressHold.duration", "addressHold.duration must be between 1s and 168h"}},
	{"pool: addressHold not a duration", schema, "IPAddressPool", "addresses: [10.0.0.0/24]\naddressHold: {duration: ten minutes}",
		[]string{"spec.addressHold.duration", "should match"}},
	{"pool: unknown field", strict, "IPAddressPool", "addresses: [10.0.0.0/24]\nautoassign: false",
		[]string{`unknown field "spec.autoassign"`}},

	// BGPPeer
	{"peer: myASN 0", schema, "BGPPeer", "myASN: 0\npeerASN: 64501\npeerAddress: 198.51.100.1",
		[]string{"spec.myASN", "greater than or equal to 1"}},
	{"peer: peerASN above 32 bits", schema, "BGPPeer", "myASN: 64512\npeerASN: 4294967296\npeerAddress: 198.51.100.1",
		[]string{"spec.peerASN", "less than or equal to 4294967295"}},
	{"peer: no peerAddress", cel, "BGPPeer", "myASN: 64512\npeerASN: 64501",
		[]string{"set exactly one of peerAddress and interface"}},
	{"peer: peerAddress and interface", cel, "BGPPeer", "myASN: 64512\npeerASN: 64501\npeerAddress: 198.51.100.1\ninterface: eth1",
		[]string{"set exactly one of peerAddress and interface"}},
	{"peer: interface with a slash", schema, "BGPPeer", "myASN: 64512\npeerASN: 64501\ninterface: a/b",
		[]string{"spec.interface", "should match"}},
	{"peer: interface and ebgpMultiHop", cel, "BGPPeer", "myASN: 64512\npeerASN: 64501\ninterface: eth1\nebgpMultiHop: true",
		[]string{"an interface peer is directly connected"}},
	{"peer: interface and vrf", cel, "BGPPeer", "myASN: 64512\npeerASN: 64501\ninterface: eth1\nvrf: red",
		[]string{"vrf is not supported with an interface (unnumbered) peer"}},
	{"peer: vrf longer than a Linux device name", schema, "BGPPeer", "myASN: 64512\npeerASN: 64501\npeerAddress: 198.51.100.1\nvrf: vrf-sixteen-char",
		[]string{"spec.vrf", "may not be more than 15"}},
	{"peer: no peer AS", cel, "BGPPeer", "myASN: 64512\npeerAddress: 198.51.100.1",
		[]string{"set exactly one of peerASN, dynamicASN and peerASNFromNodeLabel"}},
	{"peer: peerASN and dynamicASN", cel, "BGPPeer", "myASN: 64512\npeerASN: 64501\ndynamicASN: external\npeerAddress: 198.51.100.1",
		[]string{"set exactly one of peerASN, dynamicASN and peerASNFromNodeLabel"}},
	{"peer: dynamicASN neither internal nor external", schema, "BGPPeer", "myASN: 64512\ndynamicASN: any\npeerAddress: 198.51.100.1",
		[]string{"spec.dynamicASN", "Unsupported value"}},
	{"peer: no local AS", cel, "BGPPeer", "peerASN: 64501\npeerAddress: 198.51.100.1",
		[]string{"set exactly one of myASN and myASNFromNodeLabel"}},
	{"peer: myASN and myASNFromNodeLabel", cel, "BGPPeer", "myASN: 64512\nmyASNFromNodeLabel: topology.portico.io/asn\npeerASN: 64501\npeerAddress: 198.51.100.1",
		[]string{"set exactly one of myASN and myASNFromNodeLabel"}},
	{"peer: malformed peerAddress", cel, "BGPPeer", "myASN: 64512\npeerASN: 64501\npeerAddress: 198.51.100",
		[]string{"spec.peerAddress", "must be an IPv4 or IPv6 address"}},
	{"peer: malformed sourceAddress", cel, "BGPPeer", "myASN: 64512\npeerASN: 64501\npeerAddress: 198.51.100.1\nsourceAddress: eth0",
		[]string{"spec.sourceAddress", "must be an IPv4 or IPv6 address"}},
	{"peer: port out of range", schema, "BGPPeer", "myASN: 64512\npeerASN: 64501\npeerAddress: 198.51.100.1\npeerPort: 70000",
		[]string{"spec.peerPort", "less than or equal to 65535"}},
	{"peer: holdTime below 3s", cel, "BGPPeer", "myASN: 64512\npeerASN: 64501\npeerAddress: 198.51.100.1\nholdTime: 1s",
		[]string{"spec.holdTime", "holdTime must be 0s or between 3s and 65535s"}},
	{"peer: holdTime not a duration", schema, "BGPPeer", "myASN: 64512\npeerASN: 64501\npeerAddress: 198.51.100.1\nholdTime: soon",
		[]string{"spec.holdTime", "should match"}},
	{"peer: keepalive not below holdTime", cel, "BGPPeer", "myASN: 64512\npeerASN: 64501\npeerAddress: 198.51.100.1\nholdTime: 9s\nkeepaliveTime: 10s",
		[]string{"spec.keepaliveTime", "keepaliveTime must be shorter than holdTime"}},
	{"peer: gracefulRestartTime without graceful restart", cel, "BGPPeer", "myASN: 64512\npeerASN: 64501\npeerAddress: 198.51.100.1\ngracefulRestartTime: 60s",
		[]string{"spec.gracefulRestartTime", "gracefulRestartTime needs enableGracefulRestart: true"}},
	{"peer: gracefulRestartTime beyond 12 bits", cel, "BGPPeer", "myASN: 64512\npeerASN: 64501\npeerAddress: 198.51.100.1\nenableGracefulRestart: true\ngracefulRestartTime: 2h",
		[]string{"spec.gracefulRestartTime", "gracefulRestartTime must be between 1s and 4095s"}},
	{"peer: IPv6 routerID", cel, "BGPPeer", "myASN: 64512\npeerASN: 64501\npeerAddress: 198.51.100.1\nrouterID: \"2001:db8::1\"",
		[]string{"spec.routerID", "routerID must be an IPv4 address"}},
	{"peer: password in plain text", strict, "BGPPeer", "myASN: 64512\npeerASN: 64501\npeerAddress: 198.51.100.1\npassword: hunter2",
		[]string{`unknown field "spec.password"`}},

	// BFDProfile
	{"bfd: receiveInterval below 10 ms", schema, "BFDProfile", "receiveInterval: 5",
		[]string{"spec.receiveInterval", "should be greater than or equal to 10"}},
	{"bfd: detectMultiplier 1", schema, "BFDProfile", "detectMultiplier: 1",
		[]string{"spec.detectMultiplier", "should be greater than or equal to 2"}},
	{"bfd: echo mode", strict, "BFDProfile", "echoMode: true",
		[]string{`unknown field "spec.echoMode"`}},
	{"bfd: MD5 authentication", schema, "BFDProfile", "authentication: {type: KeyedMD5, secretRef: {namespace: portico-system, name: bfd}}",
		[]string{"spec.authentication.type", "Unsupported value"}},
	{"bfd: key ID above 255", schema, "BFDProfile", "authentication: {type: KeyedSHA1, keyID: 256, secretRef: {namespace: portico-system, name: bfd}}",
		[]string{"spec.authentication.keyID", "less than or equal to 255"}},
	{"bfd: authentication without a Secret", schema, "BFDProfile", "authentication: {type: MeticulousKeyedSHA1}",
		[]string{"spec.authentication.secretRef", "Required value"}},

	// BGPAdvertisement
	{"bgpadv: community with one number", cel, "BGPAdvertisement", `communities: ["65000"]`,
		[]string{"spec.communities[0]", "must be a standard community such as 65000:100"}},
	{"bgpadv: standard community above 16 bits", cel, "BGPAdvertisement", `communities: ["65536:100"]`,
		[]string{"spec.communities[0]", "each number of a standard community must be at most 65535"}},
	{"bgpadv: large community with two numbers", cel, "BGPAdvertisement", `communities: ["large:64512:1"]`,
		[]string{"spec.communities[0]", "must be a standard community"}},
	{"bgpadv: large community above 32 bits", cel, "BGPAdvertisement", `communities: ["large:4294967296:1:2"]`,
		[]string{"spec.communities[0]", "each number of a large community must be at most 4294967295"}},
	{"bgpadv: aggregationLength above 32", schema, "BGPAdvertisement", `aggregationLength: 33`,
		[]string{"spec.aggregationLength", "less than or equal to 32"}},
	{"bgpadv: negative aggregationLength", schema, "BGPAdvertisement", `aggregationLength: -1`,
		[]string{"spec.aggregationLength", "greater than or equal to 0"}},
	{"bgpadv: aggregationLengthV6 above 128", schema, "BGPAdvertisement", `aggregationLengthV6: 129`,
		[]string{"spec.aggregationLengthV6", "less than or equal to 128"}},
	{"bgpadv: negative localPref", schema, "BGPAdvertisement", `localPref: -5`,
		[]string{"spec.localPref", "greater than or equal to 0"}},
	{"bgpadv: serviceSelectors with aggregation", cel, "BGPAdvertisement", "aggregationLength: 24\nserviceSelectors: [{matchLabels: {app: gitea}}]",
		[]string{"spec.serviceSelectors", "serviceSelectors cannot be combined with aggregation"}},
	{"bgpadv: bad peer name", schema, "BGPAdvertisement", `peers: [Tor_R1]`,
		[]string{"spec.peers[0]", "should match"}},

	// L2Advertisement
	{"l2adv: interface name too long", schema, "L2Advertisement", `interfaces: [averyverylongname0]`,
		[]string{"spec.interfaces[0]", "may not be more than 15"}},
	{"l2adv: interface name with a slash", schema, "L2Advertisement", `interfaces: [eth0/1]`,
		[]string{"spec.interfaces[0]", "should match"}},
	{"l2adv: bad pool name", schema, "L2Advertisement", `ipAddressPools: [Home_Lab]`,
		[]string{"spec.ipAddressPools[0]", "should match"}},
	{"l2adv: unknown field", strict, "L2Advertisement", `interface: [eth0]`,
		[]string{`unknown field "spec.interface"`}},
	{"l2adv: preference weight 0", schema, "L2Advertisement", `preferredNodeSelectors: [{weight: 0, preference: {matchLabels: {link: wired}}}]`,
		[]string{"spec.preferredNodeSelectors[0].weight", "should be greater than or equal to 1"}},
	{"l2adv: preference weight over 100", schema, "L2Advertisement", `preferredNodeSelectors: [{weight: 101, preference: {matchLabels: {link: wired}}}]`,
		[]string{"spec.preferredNodeSelectors[0].weight", "should be less than or equal to 100"}},
	{"l2adv: preference without a selector", schema, "L2Advertisement", `preferredNodeSelectors: [{weight: 10}]`,
		[]string{"spec.preferredNodeSelectors[0].preference", "Required value"}},
	{"l2adv: empty preference", cel, "L2Advertisement", `preferredNodeSelectors: [{weight: 10, preference: {}}]`,
		[]string{"spec.preferredNodeSelectors[0].preference", "an empty selector matches every node and prefers none"}},
	{"l2adv: gratuitousInterval below 1s", cel, "L2Advertisement", `gratuitousInterval: 500ms`,
		[]string{"spec.gratuitousInterval", "gratuitousInterval must be between 1s and 1h"}},
	{"l2adv: gratuitousInterval 0s", cel, "L2Advertisement", `gratuitousInterval: 0s`,
		[]string{"spec.gratuitousInterval", "gratuitousInterval must be between 1s and 1h"}},
	{"l2adv: gratuitousInterval over 1h", cel, "L2Advertisement", `gratuitousInterval: 61m`,
		[]string{"spec.gratuitousInterval", "gratuitousInterval must be between 1s and 1h"}},
	{"l2adv: gratuitousInterval not a duration", schema, "L2Advertisement", `gratuitousInterval: often`,
		[]string{"spec.gratuitousInterval", "should match"}},
}

// TestInvalidObjectsAreRejected creates each invalid object against the real apiserver and
// checks that it is refused with a message naming the field.
func TestInvalidObjectsAreRejected(t *testing.T) {
	ctx := context.Background()
	c := client.WithFieldValidation(cp.Client, "Strict")
	for i, tc := range invalidCases {
		t.Run(tc.name, func(t *testing.T) {
			obj := object(t, tc.kind, fmt.Sprintf("invalid-%d", i), tc.spec)
			err := c.Create(ctx, obj)
			if err == nil {
				_ = c.Delete(ctx, obj)
				t.Fatalf("%s was accepted; want a rejection by %s containing %q", tc.kind, tc.where, tc.want)
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
				t.Fatalf("want Invalid or BadRequest, got %v", err)
			}
			t.Logf("%s: %v", tc.where, err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("rejection lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestEdgeValuesAreAccepted checks for rules stricter than the spec says.
func TestEdgeValuesAreAccepted(t *testing.T) {
	ctx := context.Background()
	cases := []struct{ kind, spec string }{
		{"IPAddressPool", `addresses: ["10.0.0.200-10.0.0.215", "10.1.0.0/16", "10.2.0.7 - 10.2.0.7", "2001:db8::/64", "2001:db8:1::1-2001:db8:1::ff", "fc00::/7"]`},
		// Next to the special blocks, but outside them.
		{"IPAddressPool", `addresses: ["126.255.255.0/24", "128.0.0.0-169.253.255.255", "169.255.0.0/16", "223.255.255.0/24", "fe7f::/16", "fec0::/10"]`},
		{"IPAddressPool", `addresses: ["10.0.0.255-10.0.1.0"]`},
		{"IPAddressPool", `addresses: ["1.0.0.0/8", "223.0.0.0-223.255.255.255"]`}, // beside 0.0.0.0/8 and multicast
		// Special-purpose blocks a lab or a private network routes: documentation, benchmarking
		// (the tests' own 198.18.0.0/15), shared, private.
		{"IPAddressPool", `addresses: ["192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "198.18.0.0/15", "100.64.0.0/10", "10.0.0.0/8", "2001:db8::/32"]`},
		{"BGPPeer", "myASN: 4294967295\npeerASN: 1\npeerAddress: \"2001:db8::1\"\npeerPort: 65535\nholdTime: 0s\nkeepaliveTime: 30s\nrouterID: 198.51.100.7\npasswordSecret: {namespace: portico-system, name: bgp-auth}"},
		{"BGPPeer", "myASN: 64512\npeerASN: 64512\npeerAddress: 198.51.100.1\nholdTime: 3s\nkeepaliveTime: 1s\nconnectTime: 1s"},
		{"BGPAdvertisement", "aggregationLength: 0\naggregationLengthV6: 0\nlocalPref: 4294967295\ncommunities: [\"0:0\", \"65535:65535\", \"large:4294967295:0:4294967295\", no-export]"},
		{"BGPAdvertisement", "serviceSelectors: [{matchLabels: {app: gitea}}]\naggregationLength: 32"},
		{"L2Advertisement", "interfaces: [eth0, enp0s31f6, br-lan.10]"},
		{"L2Advertisement", "gratuitousInterval: 1s"},
		{"L2Advertisement", "gratuitousInterval: 1h"},
		{"L2Advertisement", "preferredNodeSelectors: [{weight: 1, preference: {matchLabels: {link: wired}}}, {weight: 100, preference: {matchExpressions: [{key: link, operator: In, values: [wifi]}]}}]"},
		{"BFDProfile", "receiveInterval: 10\ntransmitInterval: 60000\ndetectMultiplier: 255\npassiveMode: true\nminimumTtl: 254"},
		{"BFDProfile", "authentication: {type: MeticulousKeyedSHA1, keyID: 255, secretRef: {namespace: portico-system, name: bfd, key: sha1}}"},
		{"BGPPeer", "myASN: 64512\npeerASN: 64501\npeerAddress: 198.51.100.1\nbfdProfile: fast"},
		{"BGPPeer", "myASNFromNodeLabel: topology.portico.io/asn\ndynamicASN: external\ninterface: enp1s0f0.100"},
		{"BGPPeer", "myASN: 64512\ndynamicASN: internal\npeerAddress: 198.51.100.1"},
		{"BGPPeer", "myASN: 64512\npeerASN: 64501\npeerAddress: 192.0.2.1\nvrf: vrf-fifteen-chr"},
		{"BGPPeer", "myASN: 64512\npeerASNFromNodeLabel: example.com/leaf-asn\npeerAddress: 198.51.100.1"},
		{"BGPPeer", "myASN: 64512\npeerASN: 64501\npeerAddress: 198.51.100.1\nenableGracefulRestart: true\ngracefulRestartTime: 4095s"},
		{"BGPPeer", "myASN: 64512\npeerASN: 64501\npeerAddress: 198.51.100.1\nenableGracefulRestart: true\ngracefulRestartTime: 1s"},
	}
	c := client.WithFieldValidation(cp.Client, "Strict")
	for i, tc := range cases {
		obj := object(t, tc.kind, fmt.Sprintf("edge-%d", i), tc.spec)
		if err := c.Create(ctx, obj); err != nil {
			t.Errorf("%s %s refused: %v", tc.kind, tc.spec, err)
			continue
		}
		if err := c.Delete(ctx, obj); err != nil {
			t.Error(err)
		}
	}
}

// TestDefaults checks the defaults the schema fills in.
func TestDefaults(t *testing.T) {
	ctx := context.Background()
	pool := object(t, "IPAddressPool", "defaults", `addresses: [10.0.0.0/24]`)
	peer := object(t, "BGPPeer", "defaults", "myASN: 64512\npeerASN: 64501\npeerAddress: 198.51.100.1\npasswordSecret: {namespace: ns, name: s}")
	adv := object(t, "BGPAdvertisement", "defaults", ``)
	for _, o := range []*unstructured.Unstructured{pool, peer, adv} {
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cp.Client.Delete(ctx, o) })
	}
	checks := []struct {
		obj  *unstructured.Unstructured
		path []string
		want any
	}{
		{pool, []string{"spec", "autoAssign"}, true},
		{pool, []string{"spec", "conflictProbing"}, "Enabled"},
		{peer, []string{"spec", "peerPort"}, int64(179)},
		{peer, []string{"spec", "passwordSecret", "key"}, "password"},
		{adv, []string{"spec", "aggregationLength"}, int64(32)},
		{adv, []string{"spec", "aggregationLengthV6"}, int64(128)},
	}
	for _, c := range checks {
		got, _, _ := unstructured.NestedFieldNoCopy(c.obj.Object, c.path...)
		if got != c.want {
			t.Errorf("%s %s = %v (%T), want %v", c.obj.GetKind(), strings.Join(c.path, "."), got, got, c.want)
		}
	}
}

func object(t *testing.T, kind, name, spec string) *unstructured.Unstructured {
	t.Helper()
	var s map[string]any
	if err := yaml.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatalf("test spec %q: %v", spec, err)
	}
	if s == nil {
		s = map[string]any{}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": s}}
	u.SetAPIVersion("portico.dev/v1alpha1")
	u.SetKind(kind)
	u.SetName(name)
	return u
}

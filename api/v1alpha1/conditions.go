package v1alpha1

// Condition types on a LoadBalancer Service's status.conditions, written by the controller.
const (
	// ConditionIPAllocated: the Service holds an address (or why not).
	ConditionIPAllocated = "portico.dev/IPAllocated"
	// ConditionEndpointsReady: the Service's EndpointSlices hold ready endpoints.
	ConditionEndpointsReady = "portico.dev/EndpointsReady"
	// ConditionAnnounced: some node announces the address over L2 or BGP.
	ConditionAnnounced = "portico.dev/Announced"
	// ConditionReachable: the network answers for the address from the expected node.
	ConditionReachable = "portico.dev/Reachable"
)

// Reasons of ConditionIPAllocated.
const (
	ReasonAllocated               = "Allocated"
	ReasonNoMatchingPool          = "NoMatchingPool"
	ReasonPoolExhausted           = "PoolExhausted"
	ReasonRequestedIPInUse        = "RequestedIPInUse"
	ReasonRequestedIPNotInAnyPool = "RequestedIPNotInAnyPool"
	ReasonSharingConflict         = "SharingConflict"
	ReasonFamilyUnavailable       = "FamilyUnavailable"
	ReasonInvalidAnnotation       = "InvalidAnnotation"
	ReasonOrphanedIP              = "OrphanedIP"
	// ReasonNotAllowedByPool: the requested pool, or the pool holding a requested address,
	// has a serviceAllocation that does not select the Service.
	ReasonNotAllowedByPool = "NotAllowedByPool"
	// ReasonPoolsOfOneFamily: portico.dev/address-pool names two pools that both hold one
	// family; each family must come from one named pool. The Service keeps what it holds.
	ReasonPoolsOfOneFamily = "PoolsOfOneFamily"
	// ReasonTerminating: the Service is deleted but a finalizer holds it; it keeps its
	// addresses (True) or waits for none (False) until it is gone.
	ReasonTerminating = "Terminating"
)

// Reasons of ConditionEndpointsReady.
const (
	ReasonNoEndpoints      = "NoEndpoints"
	ReasonNoReadyEndpoints = "NoReadyEndpoints"
	ReasonNoSelector       = "NoSelector"
	ReasonEndpointsReady   = "Ready"
)

// Reasons of ConditionAnnounced.
const (
	ReasonAnnouncedL2      = "L2"
	ReasonAnnouncedBGP     = "BGP"
	ReasonNoAdvertisement  = "NoAdvertisement"
	ReasonNoEligibleNode   = "NoEligibleNode"
	ReasonNoLocalEndpoints = "NoLocalEndpoints"
	ReasonNoSpeakers       = "NoSpeakers"
	// ReasonAnnouncePending: a node may announce the address but no speaker reports doing so yet.
	ReasonAnnouncePending = "Pending"
)

// ReasonNoAddress: Announced and Reachable have nothing to say until the Service has an address.
const ReasonNoAddress = "NoAddress"

// Reasons of ConditionReachable.
const (
	ReasonAnswered        = "Answered"
	ReasonNoAnswer        = "NoAnswer"
	ReasonMultipleAnswers = "MultipleAnswers"
	ReasonForeignAnswer   = "ForeignAnswer"
	// ReasonStaleAnswer: one speaker answers, but not the one that announces the address.
	ReasonStaleAnswer = "StaleAnswer"
	// ReasonNotProbed: no speaker reports a probe of the address (self-check off, or a
	// single node: the owner does not probe itself).
	ReasonNotProbed = "NotProbed"
)

// Condition types on Portico objects (pools, advertisements, peers, speakers).
const (
	// ConditionReady: the object is valid and in use.
	ConditionReady = "Ready"
	// ConditionOverlapping: a pool shares addresses with another pool.
	ConditionOverlapping = "Overlapping"
	// ConditionExhausted: a pool has no free address left.
	ConditionExhausted = "Exhausted"
)

// Reasons of the Ready condition on a pool.
const (
	ReasonValid            = "Valid"
	ReasonInvalidAddresses = "InvalidAddresses"
	ReasonInvalidSelector  = "InvalidSelector"
	// ReasonInvalidAddressHold: spec.addressHold.duration is out of bounds; nothing is held.
	ReasonInvalidAddressHold = "InvalidAddressHold"
)

// ConditionOrphanedIPs: Services hold addresses that this pool gave them but no longer
// contains (the pool was shrunk); they keep them until they let go.
const ConditionOrphanedIPs = "OrphanedIPs"

// ConditionAddressesInUse on a pool: a foreign host answers for some of its free addresses
// (status.inUse), which are not handed out while it does.
const ConditionAddressesInUse = "AddressesInUse"

// Reasons of ConditionAddressesInUse; ReasonAddressInUse and ReasonProxyAnswerer are also the
// Warning events' reasons. ReasonProxyAnswerer: no address is held back, but a MAC answers for
// more probed addresses than one host plausibly holds (status.proxyAnswerers), and its answers
// are ignored. ReasonProbingDisabled: the pool's spec.conflictProbing is Disabled.
const (
	ReasonAddressInUse    = "AddressInUse"
	ReasonNoneInUse       = "NoneInUse"
	ReasonProxyAnswerer   = "ProxyAnswerer"
	ReasonProbingDisabled = "ProbingDisabled"
)

// ConditionSharedProblem on a pool: more of its Services have one health problem (condition
// type and reason) than is each one's news, or any have a problem that is the cluster's (no
// speaker, no advertisement); the reason is the most widely shared one's, the message counts
// each. It is told once on the pool, not on every Service (whose condition still says it).
const ConditionSharedProblem = "SharedProblem"

// Reasons of ConditionSharedProblem besides the health conditions' own, and of the Normal event
// that tells a shared problem's end.
const (
	ReasonNoSharedProblem   = "NoSharedProblem"
	ReasonSharedProblemOver = "SharedProblemOver"
)

// ConditionSessionsEstablished on a BGPPeer: every node that should hold a session with the
// peer reports it Established.
const ConditionSessionsEstablished = "SessionsEstablished"

// Reasons of ConditionSessionsEstablished.
const (
	ReasonAllEstablished = "AllEstablished"
	ReasonNotEstablished = "NotEstablished"
	ReasonNoSessions     = "NoSessions"
	// ReasonPrefixLimitReached: a session is down because the router sent more routes than
	// the peer's maxPrefixes, so the speaker ceased it (RFC 4486 subcode 1); also the
	// session's own reason in the Speaker's and the BGPPeer's status.
	ReasonPrefixLimitReached = "PrefixLimitReached"
)

// Reasons of the Ready condition on an L2Advertisement or BGPAdvertisement (besides Valid and
// InvalidSelector): what it refers to that does not exist or selects nothing.
const (
	ReasonUnknownPool = "UnknownPool"
	ReasonUnknownPeer = "UnknownPeer"
	ReasonNoPool      = "NoPool"
	ReasonNoPeer      = "NoPeer"
	ReasonNoNode      = "NoNode"
)

// ConditionStrictARP on a Speaker, present when the node has kube-proxy's kube-ipvs0 device:
// IPVS mode puts every Service address on it, and unless net.ipv4.conf.all.arp_ignore is 1 or
// 2 (kube-proxy's strictARP) the kernel of every node answers ARP for every one of them.
const ConditionStrictARP = "StrictARP"

// Reasons of ConditionStrictARP.
const (
	ReasonArpIgnoreSet         = "ArpIgnoreSet"
	ReasonIPVSWithoutStrictARP = "IPVSWithoutStrictARP"
	ReasonArpIgnoreUnreadable  = "ArpIgnoreUnreadable"
)

// ConditionHandoffMarks on a Speaker, present when its hand-off is on (--l2-handoff-grace > 0):
// whether the hand-off's mark bits are used by no other rule the speaker sees on the node
// (another nftables table, iptables-nft, a policy-routing rule); the hand-off does not run on
// a bit another rule uses.
const ConditionHandoffMarks = "HandoffMarks"

// Reasons of ConditionHandoffMarks. MarksFree: the hand-off runs, by address and by flow.
// HandoffMarkInUse: another rule uses the hand-off bit, so nothing is handed off. SlotMarksInUse:
// another rule uses a slot bit, or there are none (NoSlotMarks), so the hand-off runs by address
// only (over L2) and BGP flow sharing is off. MarksUnreadable: the node's rules could not be read,
// HandoffFailed: the hand-off's table or rules could not be made; in both the hand-off is off.
const (
	ReasonMarksFree        = "MarksFree"
	ReasonHandoffMarkInUse = "HandoffMarkInUse"
	ReasonSlotMarksInUse   = "SlotMarksInUse"
	ReasonNoSlotMarks      = "NoSlotMarks"
	ReasonMarksUnreadable  = "MarksUnreadable"
	ReasonHandoffFailed    = "HandoffFailed"
)

// ConditionDataPath on a Speaker: whether the speaker holds what its packet path needs on the
// node: CAP_NET_RAW for the ARP/NDP answers, self-checks and conflict probes; CAP_NET_ADMIN and
// the kernel's nf_tables for the forwarding guard and the L2 hand-off (when they are on).
const ConditionDataPath = "DataPath"

// Reasons of ConditionDataPath. NetRawMissing: no CAP_NET_RAW, so the node answers no ARP or
// NDP and probes nothing. NetAdminMissing: no CAP_NET_ADMIN, so no forwarding guard and no
// hand-off. NftablesUnavailable: the guard's or the hand-off's nftables table could not be
// made (the kernel lacks nf_tables, or refused).
const (
	ReasonDataPathComplete    = "Complete"
	ReasonNetRawMissing       = "NetRawMissing"
	ReasonNetAdminMissing     = "NetAdminMissing"
	ReasonNftablesUnavailable = "NftablesUnavailable"
)

// ReasonCannotAnswer (ConditionAnnounced): the node that should answer for the address over L2
// runs a speaker that cannot (its DataPath condition says NetRawMissing).
const ReasonCannotAnswer = "CannotAnswer"

// ConditionBFD on a BGPPeer that names a bfdProfile: whether every node's session with the
// peer runs BFD with it. A node that cannot apply the profile runs the BGP session without BFD.
const ConditionBFD = "BFD"

// Reasons of ConditionBFD (and of a Speaker's status.sessions[].bfdReason). BFDKeyUnusable: the
// key's Secret cannot be read (missing, or the speaker may not get it), lacks the key, or the
// key is too long. BFDProfileNotFound: no BFDProfile of that name. BFDNotSupported: BFD with an
// unnumbered (interface) or vrf peer.
const (
	ReasonBFDProfileApplied  = "ProfileApplied"
	ReasonBFDKeyUnusable     = "BFDKeyUnusable"
	ReasonBFDProfileNotFound = "BFDProfileNotFound"
	ReasonBFDNotSupported    = "BFDNotSupported"
)

package v1alpha1

// MaxBGPRoutes caps the routes a Speaker status lists (the others are counted): one entry per
// prefix and set of attributes, whatever the number of peers it goes to, typically 100–200
// bytes of JSON. MaxRouteCommunities caps the communities an entry lists. At the widest
// (IPv6 /128s to three peers with eight large communities each) the list is about 120 KB
// (TestBGPRoutesCap), 7 % of the apiserver's 1.5 MiB object limit.
const (
	MaxBGPRoutes        = 256
	MaxRouteCommunities = 8
)

// SpeakerBGP is what this node's BGP side does, for `kubectl portico routes`: per peer, the
// AS numbers and address in use (learned ones included), and the routes with the attributes
// the routers get.
type SpeakerBGP struct {
	// Peers, one per BGPPeer this node holds a session with.
	// +listType=map
	// +listMapKey=peer
	// +optional
	Peers []BGPPeerInUse `json:"peers,omitempty"`
	// Routes advertised, sorted by prefix; at most 256, the others counted in omittedRoutes.
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	// +optional
	Routes []AdvertisedRoute `json:"routes,omitempty"`
	// OmittedRoutes counts the routes left out of routes.
	// +kubebuilder:validation:Minimum=0
	// +optional
	OmittedRoutes int32 `json:"omittedRoutes,omitempty"`
}

// BGPPeerInUse is one session's settings as this node resolved them.
type BGPPeerInUse struct {
	// Peer is the BGPPeer's name.
	Peer string `json:"peer"`
	// Address of the router: the BGPPeer's, or the link-local address found on its interface.
	// +optional
	Address string `json:"address,omitempty"`
	// MyASN in use (a node label's, for myASNFromNodeLabel).
	// +optional
	// +kubebuilder:validation:Format=int64
	MyASN uint32 `json:"myASN,omitempty"`
	// PeerASN in use; for dynamicASN external, the router's as its OPEN gave it (0 before).
	// +optional
	// +kubebuilder:validation:Format=int64
	PeerASN uint32 `json:"peerASN,omitempty"`
}

// AdvertisedRoute is one prefix sent with one set of attributes to the peers named.
type AdvertisedRoute struct {
	// +kubebuilder:validation:MaxLength=43
	Prefix string `json:"prefix"`
	// Peers (BGPPeer names) the route goes to.
	// +listType=atomic
	Peers []string `json:"peers"`
	// NextHop when it is not the session's own address (a prefix of the other family).
	// +optional
	NextHop string `json:"nextHop,omitempty"`
	// LocalPref, on iBGP sessions only.
	// +optional
	// +kubebuilder:validation:Format=int64
	LocalPref uint32 `json:"localPref,omitempty"`
	// Communities, standard ("65000:100", "no-export") then large ("large:1:2:3"); at most
	// 8, the last then saying how many more there are ("+5 more").
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +optional
	Communities []string `json:"communities,omitempty"`
}

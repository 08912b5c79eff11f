// Package migrate translates MetalLB's configuration (metallb.io IPAddressPool,
// L2Advertisement, BGPAdvertisement, BGPPeer v1beta1 and v1beta2, Community) into Portico's
// objects: `kubectl portico migrate`. The translation is a pure function of the objects read;
// every field it cannot carry over is listed with the reason, never dropped silently.
// Services need no change: Portico honours MetalLB's annotations.
package migrate

package windows

import (
	"net/netip"

	"github.com/weftnet/weft/subnet"
)

// SourceVIP is the address of the node subnet kept for kube-proxy's source VIP on overlay
// (kube-proxy makes the endpoint itself when given the address): the last address before
// the broadcast address. Pods must not get it: the CNI's IPAM range has to end before it
// (host-local "rangeEnd"); peers' remote endpoints cover it like any pod address. The plane
// writes it where the CNI plugin and kube-proxy's start-up read it (hnsfile.SourceVIPFile).
func SourceVIP(sn netip.Prefix) netip.Addr { return subnet.LastAddr(sn).Prev() }

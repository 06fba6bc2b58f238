package linux

import (
	"bytes"
	"cmp"
	"net/netip"
	"slices"
	"time"

	"github.com/weftnet/weft/backend"
)

// wgHalf names one family's half of a peer lease on a WireGuard device.
type wgHalf struct {
	fam backend.Family
	key string // the lease's key
}

// wgPeers is what the planes programmed on one WireGuard device: the lease halves of every
// family that uses it, and the WireGuard peers they make. In separate mode a device carries
// one family; in flannel's single-tunnel modes it carries both, and the two halves of a peer
// lease are one WireGuard peer with both subnets as its allowed IPs.
type wgPeers struct {
	halves map[wgHalf]backend.Peer
	byKey  map[backend.Key]map[wgHalf]struct{}
	// held are the peers programmed without their keepalive, so as to answer first (see
	// answersFirst), and since when.
	held map[backend.Key]time.Time
}

func newWGPeers() *wgPeers {
	return &wgPeers{halves: map[wgHalf]backend.Peer{}, byKey: map[backend.Key]map[wgHalf]struct{}{},
		held: map[backend.Key]time.Time{}}
}

// answersFirst reports whether a node whose public key is own lets the peer of key peer
// make their first handshake. Two nodes usually learn of each other at the same moment (one
// node's lease put is the other's start), and a peer programmed with a keepalive sends its
// handshake initiation at once: both would initiate together, each handshake state would
// replace the other's, and both responses would be dropped, so that the tunnel waits for
// WireGuard's retry, 5 s later (and again, if the retries collide too). Of two nodes, the
// one with the greater key holds its keepalive for wgAnswerFirst; the other dials at once.
func answersFirst(own, peer backend.Key) bool { return bytes.Compare(own[:], peer[:]) > 0 }

// hold records that k was programmed without its keepalive at now.
func (ps *wgPeers) hold(k backend.Key, now time.Time) { ps.held[k] = now }

// isHeld reports whether k's keepalive is held.
func (ps *wgPeers) isHeld(k backend.Key) bool { _, ok := ps.held[k]; return ok }

// due forgets and returns the held keys held for wait by now, and how long until the next
// of the others is (0: none is held).
func (ps *wgPeers) due(now time.Time, wait time.Duration) ([]backend.Key, time.Duration) {
	var keys []backend.Key
	var next time.Duration
	for k, since := range ps.held {
		if left := wait - now.Sub(since); left > 0 {
			if next == 0 || left < next {
				next = left
			}
			continue
		}
		keys = append(keys, k)
		delete(ps.held, k)
	}
	return keys, next
}

// has reports whether any half has the key k.
func (ps *wgPeers) has(k backend.Key) bool { return len(ps.byKey[k]) > 0 }

// set makes h's half p (the zero Peer: none) and returns the WireGuard keys whose peer that
// changes: the half's old key and its new one.
func (ps *wgPeers) set(h wgHalf, p backend.Peer) []backend.Key {
	var keys []backend.Key
	if old, ok := ps.halves[h]; ok {
		if old.Equal(p) {
			return nil
		}
		was := old.WGKey()
		delete(ps.halves, h)
		delete(ps.byKey[was], h)
		if len(ps.byKey[was]) == 0 {
			delete(ps.byKey, was)
			delete(ps.held, was)
		}
		keys = append(keys, was)
	}
	if p.IsValid() {
		k := p.WGKey()
		ps.halves[h] = p
		if ps.byKey[k] == nil {
			ps.byKey[k] = map[wgHalf]struct{}{}
		}
		ps.byKey[k][h] = struct{}{}
		if len(keys) == 0 || keys[0] != k {
			keys = append(keys, k)
		}
	}
	return keys
}

// setFamily makes peers, by lease key, the whole of fam's halves.
func (ps *wgPeers) setFamily(fam backend.Family, peers map[string]backend.Peer) {
	for h := range ps.halves {
		if _, ok := peers[h.key]; h.fam == fam && !ok {
			ps.set(h, backend.Peer{})
		}
	}
	for k, p := range peers {
		ps.set(wgHalf{fam, k}, p)
	}
}

// wgPeer is a WireGuard peer as the device should have it.
type wgPeer struct {
	key      backend.Key
	endpoint netip.AddrPort
	allowed  []netip.Prefix // sorted, masked
}

// want is the WireGuard peer of key k, and whether any half has k. Its allowed IPs are every
// half's subnet; its endpoint the IPv4 half's, where the halves differ (in single-tunnel
// modes they agree: backend.Backend.wgEndpoint picks one for both).
func (ps *wgPeers) want(k backend.Key) (wgPeer, bool) {
	hs := ps.byKey[k]
	if len(hs) == 0 {
		return wgPeer{}, false
	}
	order := make([]wgHalf, 0, len(hs))
	for h := range hs {
		order = append(order, h)
	}
	slices.SortFunc(order, func(a, b wgHalf) int {
		return cmp.Or(cmp.Compare(a.fam, b.fam), cmp.Compare(a.key, b.key))
	})
	wp := wgPeer{key: k}
	if first := ps.halves[order[0]].WireGuard; first != nil {
		wp.endpoint = first.Endpoint
	}
	for _, h := range order {
		wp.allowed = append(wp.allowed, ps.halves[h].Subnet.Masked())
	}
	slices.SortFunc(wp.allowed, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	wp.allowed = slices.Compact(wp.allowed)
	return wp, true
}

// all is every WireGuard peer the device should have, by key.
func (ps *wgPeers) all() map[backend.Key]wgPeer {
	m := make(map[backend.Key]wgPeer, len(ps.byKey))
	for k := range ps.byKey {
		m[k], _ = ps.want(k)
	}
	return m
}

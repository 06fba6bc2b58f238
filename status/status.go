// Package status holds the wire types of weftd's /status endpoint: what the daemon serves and
// what weftctl and the tests read. It is kept apart from the daemon so that its readers do not
// link weftd.
package status

import (
	"encoding/json"
	"time"
)

// Node is what /status reports: the node's lease, its peers and the last convergence.
type Node struct {
	Interface string `json:"interface"`
	Address   string `json:"address"`
	PublicIP  string `json:"publicIP"`
	// The IPv6 address and public IPv6 address, when the network enables IPv6.
	Address6   string    `json:"address6,omitempty"`
	PublicIPv6 string    `json:"publicIPv6,omitempty"`
	Backend    string    `json:"backend"`
	Lease      *Lease    `json:"lease,omitempty"`
	Peers      []Peer    `json:"peers"`
	Last       *Converge `json:"lastConvergence,omitempty"`
	// Overlay is what the probes through the data plane find; nil when they are off.
	Overlay     *Overlay      `json:"overlay,omitempty"`
	Unreachable []Unreachable `json:"unreachable,omitempty"`
	// Offload is the transmit checksum offload of each overlay device; none for host-gw.
	Offload []Offload `json:"offload,omitempty"`
	// WireGuard is each WireGuard device (the wireguard backend): which WireGuard runs it.
	WireGuard []WireGuard `json:"wireguard,omitempty"`
	// NetworkPolicy is what --network-policy enforces for the node's pods; nil when off.
	NetworkPolicy *NetworkPolicy `json:"networkPolicy,omitempty"`
	Ready         bool           `json:"ready"`
	NotReady      string         `json:"notReadyReason,omitempty"`
}

// NetworkPolicy is the NetworkPolicy enforcement of the node's pods, as last written.
type NetworkPolicy struct {
	// Pods are the node's pods that a policy isolates, by "namespace/name".
	Pods []PolicyPod `json:"pods"`
	// Open is how many of the node's pods no policy isolates.
	Open int `json:"open"`
	// Refused are the policies weft cannot enforce as written (the pods they select are
	// denied in their directions).
	Refused []PolicyRefused `json:"refused,omitempty"`
	// Written is when the rules were last written to the data plane, and what; Error the
	// last write's failure.
	Written *time.Time `json:"written,omitempty"`
	Error   string     `json:"error,omitempty"`
}

// PolicyPod is one isolated pod of the node: its directions and the policies that select it.
type PolicyPod struct {
	Pod      string   `json:"pod"`
	IPs      []string `json:"ips"`
	Ingress  bool     `json:"ingress"` // isolated for ingress
	Egress   bool     `json:"egress"`  // isolated for egress
	Policies []string `json:"policies"`
}

// PolicyRefused is a policy weft cannot enforce as written, and why.
type PolicyRefused struct {
	Policy string `json:"policy"`
	Reason string `json:"reason"`
}

// WireGuard is one WireGuard device of the node.
type WireGuard struct {
	Device     string `json:"device"`
	ListenPort int    `json:"listenPort"`
	PublicKey  string `json:"publicKey"`
	// Implementation is "kernel", or "user space" where the kernel has no WireGuard: that
	// device runs in weftd and stops with it, so a restart cuts the tunnels until it is back.
	Implementation string `json:"implementation"`
}

// Lease is the node's own lease.
type Lease struct {
	Subnet      string          `json:"subnet"`
	IPv6Subnet  string          `json:"ipv6Subnet,omitempty"`
	Expiration  *time.Time      `json:"expiration,omitempty"`
	BackendData json.RawMessage `json:"backendData,omitempty"`
}

// Peer is one peer lease and what the data plane does with it.
// A dual-stack peer has one entry per family: its IPv4 half and its IPv6 half (Family
// "IPv6") are programmed, or skipped, apart.
type Peer struct {
	Key         string          `json:"key"`
	Family      string          `json:"family,omitempty"` // "IPv6" for an IPv6 half, else empty
	Subnet      string          `json:"subnet"`
	PublicIP    string          `json:"publicIP"`
	BackendType string          `json:"backendType"`
	BackendData json.RawMessage `json:"backendData,omitempty"`
	State       string          `json:"state"` // programmed, skipped
	Reason      string          `json:"reason,omitempty"`
	// ClashesWith is the key of the lease that won a claim this one also makes (the same
	// subnet, public IP or VTEP MAC): the older peer lease, or this node's own.
	ClashesWith string `json:"clashesWith,omitempty"`
}

// Converge is the last convergence.
type Converge struct {
	Time     time.Time `json:"time"`
	Duration string    `json:"duration"`
	Changes  string    `json:"changes,omitempty"`
	Error    string    `json:"error,omitempty"`
}

// Overlay sums up the probes through the data plane.
type Overlay struct {
	Peers       int    `json:"peers"`       // probed (each IP family's half apart)
	Answered    int    `json:"answered"`    // whose last probe was answered
	Unreachable int    `json:"unreachable"` // whose last probes all went unanswered
	Period      string `json:"period"`      // every peer is probed at least this often
	// MTU is the size of the echoes that check the overlay peers' paths carry what the pods
	// send (their MTU); 0 when there are no such checks (host-gw).
	MTU int `json:"mtu,omitempty"`
	// MTUShort lists the peers whose path carries less: they answer small echoes through
	// the tunnel, not those of MTU bytes.
	MTUShort []PathMTU `json:"mtuShort,omitempty"`
}

// PathMTU is an overlay peer whose path carries less than the pods' MTU.
type PathMTU struct {
	Key     string `json:"key"`
	Family  string `json:"family,omitempty"` // "IPv6" for an IPv6 half
	Address string `json:"address"`          // probed: its VTEP address
	// MTU is the largest packet the peer (or a router on the way) said it passes on; 0
	// when the large echoes were just lost.
	MTU int `json:"mtu,omitempty"`
}

// Unreachable is a peer whose last probes all went unanswered.
type Unreachable struct {
	Key     string    `json:"key"`
	Family  string    `json:"family,omitempty"` // "IPv6" for an IPv6 half
	Address string    `json:"address"`          // probed: its VTEP address or subnet gateway
	Since   time.Time `json:"since"`            // the first unanswered probe
	Error   string    `json:"error,omitempty"`
}

// Offload is the transmit checksum offload of one overlay device, and what the checks of
// TCP and UDP through it find.
type Offload struct {
	Device     string `json:"device"`
	Mode       string `json:"mode"`       // --vxlan-tx-checksum-offload: auto, on, off
	TxChecksum bool   `json:"txChecksum"` // on
	// Reason says why it is off: turned off by weftd (and for which peer), by the flag, or
	// found so.
	Reason string `json:"reason,omitempty"`
	// Problem names the peers that answer ICMP through the tunnel but neither TCP nor UDP,
	// and says whether turning the offload off did not help them.
	Problem string `json:"problem,omitempty"`
}

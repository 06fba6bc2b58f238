package backend

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"golang.org/x/crypto/curve25519"
)

// WireGuard's device names, flannel's.
const (
	WGDeviceName   = "flannel-wg"
	WG6DeviceName  = "flannel-wg-v6"
	WireGuardLabel = "wireguard"
)

// WGOverhead is what WireGuard adds to a packet, taken from the underlay's MTU as flannel
// takes it: the outer IP header (counted as IPv6's 40 bytes over either family), UDP (8),
// type, key index and nonce (16) and the authentication tag (16).
const WGOverhead = 80

// Key is a WireGuard key (private, public or preshared): 32 bytes, written in base64.
type Key [32]byte

// ParseKey reads a key as wg(8) and flannel write it: standard base64 of 32 bytes.
func ParseKey(s string) (Key, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != 32 {
		return Key{}, fmt.Errorf("%q is not a WireGuard key (32 bytes in base64)", s)
	}
	return Key(b), nil
}

func (k Key) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

// IsZero reports whether k is the zero key, which stands for none.
func (k Key) IsZero() bool { return k == Key{} }

// PublicKey is the public key of the private key k.
func (k Key) PublicKey() Key {
	pub, err := curve25519.X25519(k[:], curve25519.Basepoint)
	if err != nil {
		return Key{} // only a low-order point fails, and the base point is none
	}
	return Key(pub)
}

// WireGuardData is the BackendData (and BackendV6Data) of a wireguard lease:
// {"PublicKey":"<base64>","Port":51820}.
type WireGuardData struct {
	PublicKey Key
	Port      uint16
}

type wireWGData struct {
	PublicKey string
	Port      uint16
}

// Encode renders the lease data as flannel writes it.
func (d WireGuardData) Encode() json.RawMessage {
	b, _ := json.Marshal(wireWGData{PublicKey: d.PublicKey.String(), Port: d.Port}) // cannot fail
	return b
}

// DecodeWireGuardData parses a peer's wireguard BackendData. A Port of 0 (flannel before it
// published ports) is returned as 0: the reader's own port stands in, as flanneld does.
func DecodeWireGuardData(raw json.RawMessage) (WireGuardData, error) {
	var w wireWGData
	if len(raw) == 0 {
		return WireGuardData{}, errors.New("no backend data")
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return WireGuardData{}, fmt.Errorf("backend data: %w", err)
	}
	k, err := ParseKey(w.PublicKey)
	if err != nil {
		return WireGuardData{}, fmt.Errorf("backend data: PublicKey: %w", err)
	}
	if k.IsZero() {
		return WireGuardData{}, errors.New("backend data: PublicKey is the zero key")
	}
	return WireGuardData{PublicKey: k, Port: w.Port}, nil
}

// WireGuardDevice is a family's WireGuard device: flannel-wg (IPv4) or flannel-wg-v6.
type WireGuardDevice struct {
	Name       string
	ListenPort uint16
	MTU        int
	PrivateKey Key
	PSK        Key // zero: none
	// Keepalive is every peer's persistent keepalive interval; 0 none.
	Keepalive time.Duration
}

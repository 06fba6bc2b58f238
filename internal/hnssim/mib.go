package hnssim

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
)

// The IP Helper structures the simulated iphlpapi.dll hands over as the bytes its caller
// passed, in their x86-64 layout (netioapi.h and ws2ipdef.h of the Windows SDK, as
// golang.org/x/sys/windows declares them: mib_windows_test.go holds the two together).
// Blank fields are the C compiler's padding; encoding/binary reads past them and writes
// zeros.

// Address families (ws2def.h).
const (
	afUnspec = 0
	afInet   = 2
	afInet6  = 23
)

// sockaddrInet is a SOCKADDR_INET: a SOCKADDR_IN or a SOCKADDR_IN6 by its family (the
// IPv4 address at byte 4, the IPv6 one at byte 8, after the flow info).
type sockaddrInet [28]byte

func (s *sockaddrInet) family() uint16 { return binary.LittleEndian.Uint16(s[:2]) }

// addr is the address, invalid for a family other than IPv4's and IPv6's.
func (s *sockaddrInet) addr() netip.Addr {
	switch s.family() {
	case afInet:
		return netip.AddrFrom4([4]byte(s[4:8]))
	case afInet6:
		return netip.AddrFrom16([16]byte(s[8:24]))
	}
	return netip.Addr{}
}

func sockaddrOf(a netip.Addr) sockaddrInet {
	var s sockaddrInet
	if a.Is4() {
		binary.LittleEndian.PutUint16(s[:2], afInet)
		b := a.As4()
		copy(s[4:8], b[:])
		return s
	}
	binary.LittleEndian.PutUint16(s[:2], afInet6)
	b := a.As16()
	copy(s[8:24], b[:])
	return s
}

// ipInterfaceRow is a MIB_IPINTERFACE_ROW (168 bytes).
type ipInterfaceRow struct {
	Family                               uint16
	_                                    [6]byte
	InterfaceLuid                        uint64
	InterfaceIndex                       uint32
	MaxReassemblySize                    uint32
	InterfaceIdentifier                  uint64
	MinRouterAdvertisementInterval       uint32
	MaxRouterAdvertisementInterval       uint32
	AdvertisingEnabled                   uint8
	ForwardingEnabled                    uint8
	WeakHostSend                         uint8
	WeakHostReceive                      uint8
	UseAutomaticMetric                   uint8
	UseNeighborUnreachabilityDetection   uint8
	ManagedAddressConfigurationSupported uint8
	OtherStatefulConfigurationSupported  uint8
	AdvertiseDefaultRoute                uint8
	_                                    [3]byte
	RouterDiscoveryBehavior              int32
	DadTransmits                         uint32
	BaseReachableTime                    uint32
	RetransmitTime                       uint32
	PathMtuDiscoveryTimeout              uint32
	LinkLocalAddressBehavior             int32
	LinkLocalAddressTimeout              uint32
	ZoneIndices                          [16]uint32
	SitePrefixLength                     uint32
	Metric                               uint32
	NlMtu                                uint32
	Connected                            uint8
	SupportsWakeUpPatterns               uint8
	SupportsNeighborDiscovery            uint8
	SupportsRouterDiscovery              uint8
	ReachableTime                        uint32
	TransmitOffload                      uint8
	ReceiveOffload                       uint8
	DisableDefaultRoutes                 uint8
	_                                    [1]byte
}

// unicastRow is a MIB_UNICASTIPADDRESS_ROW (80 bytes).
type unicastRow struct {
	Address            sockaddrInet
	_                  [4]byte
	InterfaceLuid      uint64
	InterfaceIndex     uint32
	PrefixOrigin       uint32
	SuffixOrigin       uint32
	ValidLifetime      uint32
	PreferredLifetime  uint32
	OnLinkPrefixLength uint8
	SkipAsSource       uint8
	_                  [2]byte
	DadState           uint32
	ScopeID            uint32
	CreationTimeStamp  int64
}

// forwardRow is a MIB_IPFORWARD_ROW2 (104 bytes); DestinationPrefix is an IP_ADDRESS_PREFIX,
// the address and its length.
type forwardRow struct {
	InterfaceLuid        uint64
	InterfaceIndex       uint32
	DestinationPrefix    sockaddrInet
	DestinationPrefixLen uint8
	_                    [3]byte
	NextHop              sockaddrInet
	SitePrefixLength     uint8
	_                    [3]byte
	ValidLifetime        uint32
	PreferredLifetime    uint32
	Metric               uint32
	Protocol             uint32
	Loopback             uint8
	AutoconfigureAddress uint8
	Publish              uint8
	Immortal             uint8
	Age                  uint32
	Origin               uint32
}

// tableHeader is the start of a MIB_UNICASTIPADDRESS_TABLE or MIB_IPFORWARD_TABLE2: the
// number of rows, then padding up to the rows' 8-byte alignment.
type tableHeader struct {
	NumEntries uint32
	_          uint32
}

// decodeRow reads a row of T from b, which must be exactly one row.
func decodeRow[T any](b []byte) (T, error) {
	var row T
	if n := binary.Size(row); len(b) != n {
		return row, fmt.Errorf("a row of %d bytes, want %d", len(b), n)
	}
	err := binary.Read(bytes.NewReader(b), binary.LittleEndian, &row)
	return row, err
}

// encode writes rows (and table headers) in their C layout.
func encode(vs ...any) []byte {
	var buf bytes.Buffer
	for _, v := range vs {
		_ = binary.Write(&buf, binary.LittleEndian, v) // fixed-size types: cannot fail
	}
	return buf.Bytes()
}

// table is a MIB table of rows.
func table[T any](rows []T) []byte {
	return encode(tableHeader{NumEntries: uint32(len(rows))}, rows)
}

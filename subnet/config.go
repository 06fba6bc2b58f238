package subnet

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Backend types weft implements.
const (
	BackendVXLAN     = "vxlan"
	BackendHostGW    = "host-gw"
	BackendWireGuard = "wireguard"
)

// WireGuard's modes (Backend.Mode), as flanneld names them: how a dual-stack network's two
// families ride the tunnels.
const (
	// WGSeparate: one device per family (flannel-wg, flannel-wg-v6), each over its family's
	// underlay, on ListenPort and ListenPortV6.
	WGSeparate = "separate"
	// WGAuto: one device, flannel-wg, carries both families, over IPv4 or IPv6 chosen per
	// peer by the addresses of both ends.
	WGAuto = "auto"
	// WGIPv4 and WGIPv6: one device carries both families, over that underlay family.
	WGIPv4 = "ipv4"
	WGIPv6 = "ipv6"
)

// WireGuard's defaults, flanneld's.
const (
	DefaultWGListenPort   = 51820
	DefaultWGListenPortV6 = 51821
)

// MaxVNI is the largest VNI VXLAN carries (24 bits); a data plane may carry fewer (see
// backend.Capabilities).
const MaxVNI = 1<<24 - 1

// maxSubnetBits bounds how many subnets a network may hold (2^62), so that subnet indexes
// fit in 64 bits. Only IPv6 can reach it, with tiny subnets in a huge network.
const maxSubnetBits = 62

// Config is the network configuration, validated, with flannel's defaults applied.
type Config struct {
	EnableIPv4 bool
	EnableIPv6 bool
	// EnableNFTables chooses flanneld's rules' kind; weftd's are nftables either way.
	EnableNFTables bool

	Network   netip.Prefix // IPv4 cluster network; zero when IPv4 is disabled
	SubnetLen int
	SubnetMin netip.Addr // first subnet that may be leased (aligned to SubnetLen)
	SubnetMax netip.Addr // last subnet that may be leased

	IPv6Network   netip.Prefix
	IPv6SubnetLen int
	IPv6SubnetMin netip.Addr
	IPv6SubnetMax netip.Addr

	Backend BackendConfig

	// Ignored lists the keys of net-conf.json that flanneld v0.28 does not read (for this
	// Backend.Type), as written ("Backend.Foo" inside Backend), sorted: weft ignores them
	// too, so that a config flanneld runs with starts weftd, and logs them at start.
	Ignored []string
}

// BackendConfig holds the keys of the Backend object. Which keys are accepted depends on Type.
type BackendConfig struct {
	Type string // lower-cased, as flanneld looks backends up and names them in leases

	// vxlan
	VNI           *uint32 // nil: the data plane's default (backend.Capabilities.VNI)
	Port          uint16  // 0: the data plane's default (8472 on Linux, 4789 on Windows)
	MTU           int     // 0: derived from the external interface
	GBP           bool
	Learning      bool
	DirectRouting bool
	MacPrefix     string // Windows remote endpoint MAC prefix, "0E-2A" form

	// wireguard
	Mode         string // WGSeparate (the default), WGAuto, WGIPv4 or WGIPv6
	ListenPort   uint16 // the IPv4 device's (or the single device's) UDP port
	ListenPortV6 uint16 // flannel-wg-v6's, in separate mode
	PSK          string // a preshared key for every peer, base64 as wg(8) writes it; "" none
	// PersistentKeepalive is how often an idle tunnel sends a keepalive (flanneld's
	// PersistentKeepaliveInterval, in seconds); 0 never.
	PersistentKeepalive time.Duration

	// Windows
	Name          string // HNS network name
	DNSServerList string // host-gw on Windows
}

// ConfigError names the key of net-conf.json that is wrong, its value and why.
type ConfigError struct {
	Key    string
	Value  string
	Reason string
}

func (e *ConfigError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("net-conf.json: %s: %s", e.Key, e.Reason)
	}
	return fmt.Sprintf("net-conf.json: %s=%s: %s", e.Key, e.Value, e.Reason)
}

func configErr(key, value, format string, args ...any) error {
	return &ConfigError{Key: key, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// rawConfig holds the keys of net-conf.json that flanneld v0.28 reads (its subnet.Config);
// decode reads them as flanneld does. Pointers tell absent keys from zero values; Backend
// is absent (nil) or the JSON as written, "null" included.
type rawConfig struct {
	EnableIPv4     *bool
	EnableIPv6     *bool
	EnableNFTables *bool
	Network        *string
	SubnetLen      *int
	SubnetMin      *string
	SubnetMax      *string
	IPv6Network    *string
	IPv6SubnetLen  *int
	IPv6SubnetMin  *string
	IPv6SubnetMax  *string
	Backend        json.RawMessage
}

// rawVXLAN holds the keys flanneld's vxlan backend reads: VNI, Port, MTU, GBP, Learning and
// DirectRouting on Linux; Name, MacPrefix, VNI, Port, GBP and DirectRouting on Windows. One
// config serves a cluster's nodes of both, so weft reads them all on every OS, and each OS
// uses those its flanneld uses.
type rawVXLAN struct {
	VNI           *int64
	Port          *int64
	MTU           *int64
	GBP           *bool
	Learning      *bool
	DirectRouting *bool
	MacPrefix     *string
	Name          *string
}

// rawWireGuard holds the keys flanneld's wireguard backend reads (Linux only: on Windows it
// has none). MTU is the underlay's, as for vxlan.
type rawWireGuard struct {
	ListenPort                  *int64
	ListenPortV6                *int64
	MTU                         *int64
	PSK                         *string
	PersistentKeepaliveInterval *int64
	Mode                        *string
}

// rawHostGW holds the keys flanneld's host-gw backend reads, on Windows only.
type rawHostGW struct {
	Name          *string
	DNSServerList *string
}

// ParseConfig decodes and validates net-conf.json. It reads what flanneld v0.28 reads, as
// flanneld reads it (key names match case-insensitively, the last of duplicates wins); a key
// flanneld does not read is ignored and listed in Ignored. A value weft cannot use as flanneld
// would, a value of the wrong type, and a backend weft does not have are refused with a
// *ConfigError naming the key, the value and why.
func ParseConfig(data []byte) (*Config, error) {
	var raw rawConfig
	ignored, err := decode(data, &raw, "")
	if err != nil {
		return nil, err
	}

	cfg := &Config{EnableIPv4: true}
	if raw.EnableIPv4 != nil {
		cfg.EnableIPv4 = *raw.EnableIPv4
	}
	if raw.EnableIPv6 != nil {
		cfg.EnableIPv6 = *raw.EnableIPv6
	}
	if raw.EnableNFTables != nil {
		cfg.EnableNFTables = *raw.EnableNFTables
	}
	if !cfg.EnableIPv4 && !cfg.EnableIPv6 {
		return nil, configErr("EnableIPv4", "false", "neither IPv4 nor IPv6 is enabled")
	}
	if cfg.EnableIPv4 {
		f := family{name: "", bits: 32, defaultLen: 24, maxLen: 30}
		r, err := f.resolve(raw.Network, raw.SubnetLen, raw.SubnetMin, raw.SubnetMax)
		if err != nil {
			return nil, err
		}
		cfg.Network, cfg.SubnetLen, cfg.SubnetMin, cfg.SubnetMax = r.network, r.subnetLen, r.min, r.max
	}
	if cfg.EnableIPv6 {
		f := family{name: "IPv6", bits: 128, defaultLen: 64, maxLen: 126}
		r, err := f.resolve(raw.IPv6Network, raw.IPv6SubnetLen, raw.IPv6SubnetMin, raw.IPv6SubnetMax)
		if err != nil {
			return nil, err
		}
		cfg.IPv6Network, cfg.IPv6SubnetLen, cfg.IPv6SubnetMin, cfg.IPv6SubnetMax = r.network, r.subnetLen, r.min, r.max
	}
	be, beIgnored, err := parseBackend(raw.Backend)
	if err != nil {
		return nil, err
	}
	cfg.Backend = be
	cfg.Ignored = append(ignored, beIgnored...)
	return cfg, nil
}

// family describes how one address family's keys are named and defaulted.
type family struct {
	name       string // key prefix: "" or "IPv6"
	bits       int
	defaultLen int // SubnetLen when the Network is large enough
	maxLen     int // longest SubnetLen: a subnet needs room for a gateway and a pod
}

type resolved struct {
	network   netip.Prefix
	subnetLen int
	min, max  netip.Addr
}

func (f family) key(k string) string { return f.name + k }

func (f family) resolve(network *string, subnetLen *int, minS, maxS *string) (resolved, error) {
	var r resolved
	netKey := f.key("Network")
	if network == nil || *network == "" {
		return r, configErr(netKey, "", "missing; it is required while %s is enabled", f.enableKey())
	}
	p, err := netip.ParsePrefix(*network)
	if err != nil {
		return r, configErr(netKey, *network, "not a CIDR: %v", err)
	}
	if p.Addr().BitLen() != f.bits || p.Addr().Zone() != "" {
		return r, configErr(netKey, *network, "not an IPv%d CIDR", map[int]int{32: 4, 128: 6}[f.bits])
	}
	if p.Masked() != p {
		return r, configErr(netKey, *network, "host bits are set; the network is %s", p.Masked())
	}
	r.network = p

	lenKey := f.key("SubnetLen")
	if subnetLen != nil && *subnetLen != 0 {
		n := *subnetLen
		switch {
		case n < 0 || n > f.maxLen:
			return r, configErr(lenKey, fmt.Sprint(n), "must be at most %d", f.maxLen)
		case n <= p.Bits():
			return r, configErr(lenKey, fmt.Sprint(n), "must be longer than the %s prefix /%d", netKey, p.Bits())
		case n < p.Bits()+2:
			return r, configErr(lenKey, fmt.Sprint(n), "%s %s must hold at least four subnets: use /%d or longer", netKey, p, p.Bits()+2)
		}
		r.subnetLen = n
	} else {
		switch {
		case p.Bits() > f.maxLen-2:
			return r, configErr(netKey, *network, "too small: the smallest usable network is /%d", f.maxLen-2)
		case p.Bits() <= f.defaultLen-2:
			r.subnetLen = f.defaultLen
		default:
			r.subnetLen = p.Bits() + 2
		}
	}

	if r.subnetLen-p.Bits() > maxSubnetBits {
		return r, configErr(lenKey, fmt.Sprint(r.subnetLen), "%s %s would hold 2^%d subnets; at most 2^%d are supported", netKey, p, r.subnetLen-p.Bits(), maxSubnetBits)
	}

	// By default the first subnet is skipped: its .0 address is the network address.
	if r.min, err = f.bound("SubnetMin", minS, r.network, r.subnetLen); err != nil {
		return r, err
	}
	if !r.min.IsValid() {
		r.min = nthSubnet(p.Addr(), 1, r.subnetLen)
	}
	if r.max, err = f.bound("SubnetMax", maxS, r.network, r.subnetLen); err != nil {
		return r, err
	}
	if !r.max.IsValid() {
		r.max = lastSubnet(p, r.subnetLen)
	}
	if r.max.Less(r.min) {
		return r, configErr(f.key("SubnetMax"), r.max.String(), "is below %s %s", f.key("SubnetMin"), r.min)
	}
	return r, nil
}

func (f family) enableKey() string {
	if f.bits == 32 {
		return "EnableIPv4"
	}
	return "EnableIPv6"
}

// bound parses SubnetMin or SubnetMax; absent or the unspecified address means "default".
func (f family) bound(k string, s *string, network netip.Prefix, subnetLen int) (netip.Addr, error) {
	key := f.key(k)
	if s == nil || *s == "" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(*s)
	if err != nil {
		return netip.Addr{}, configErr(key, *s, "not an IP address: %v", err)
	}
	if a.BitLen() != f.bits || a.Zone() != "" {
		return netip.Addr{}, configErr(key, *s, "not an address of the %s family", f.key("Network"))
	}
	if a.IsUnspecified() {
		return netip.Addr{}, nil
	}
	if !network.Contains(a) {
		return netip.Addr{}, configErr(key, *s, "outside %s %s", f.key("Network"), network)
	}
	if netip.PrefixFrom(a, subnetLen).Masked().Addr() != a {
		return netip.Addr{}, configErr(key, *s, "not on a /%d boundary (%s)", subnetLen, f.key("SubnetLen"))
	}
	return a, nil
}

// parseBackend reads the Backend object: its Type, then the keys flanneld's backend of that
// type reads; it returns the keys that backend does not read, which flanneld ignores.
func parseBackend(data json.RawMessage) (BackendConfig, []string, error) {
	var be BackendConfig
	if len(data) == 0 {
		// flanneld's code then runs its udp backend (its documentation says vxlan): whatever
		// weft picked, the nodes still on flanneld would run another backend, or fail to start
		// where their build has no udp. Only the config can say what the cluster runs.
		return be, nil, configErr("Backend", "", `missing: flanneld v0.28 then falls back to its udp backend (its documentation says vxlan), which weft does not have; set "Backend":{"Type":...} to the backend the cluster's nodes run, e.g. "vxlan"`)
	}
	if isJSONNull(data) {
		return be, nil, configErr("Backend", "null", `has no Type (flanneld stops on it too: "unknown backend type"); use {"Type":"vxlan"} or {"Type":"host-gw"}`)
	}
	var head struct{ Type *string }
	if _, err := decode(data, &head, "Backend."); err != nil {
		return be, nil, err
	}
	if head.Type == nil || *head.Type == "" {
		return be, nil, configErr("Backend.Type", "", "missing; use %q or %q", BackendVXLAN, BackendHostGW)
	}
	// flanneld looks its backends up by the lower-cased Type, and publishes that name.
	be.Type = strings.ToLower(*head.Type)
	var ignored []string
	var err error
	switch be.Type {
	case BackendVXLAN:
		var raw rawVXLAN
		if ignored, err = decode(data, &raw, "Backend.", "Type"); err == nil {
			err = be.setVXLAN(raw)
		}
	case BackendWireGuard:
		var raw rawWireGuard
		if ignored, err = decode(data, &raw, "Backend.", "Type"); err == nil {
			err = be.setWireGuard(raw)
		}
	case BackendHostGW:
		var raw rawHostGW
		if ignored, err = decode(data, &raw, "Backend.", "Type"); err == nil {
			err = be.setHostGW(raw)
		}
	default:
		err = configErr("Backend.Type", *head.Type, "%s", unsupportedBackend(be.Type))
	}
	return be, ignored, err
}

// unsupportedBackend says why weft refuses a backend type: one flanneld v0.28 has and weft
// has not, or one flanneld has not either.
func unsupportedBackend(typ string) string {
	var why string
	switch typ {
	case "udp":
		why = "weft has no udp backend (flanneld's user-space tunnel, for kernels without VXLAN)"
	case "ipip", "ipsec":
		why = "weft has no " + typ + " backend"
	case "extension":
		why = "weft runs no commands for subnets (flanneld's extension backend)"
	case "alloc":
		why = "weft has no alloc backend: it always programs the routes to the other nodes' subnets, which alloc leaves to others"
	case "tencent-vpc":
		why = "weft programs no cloud routes (flanneld's tencent-vpc backend)"
	default:
		why = "no backend of flanneld v0.28 or weft has this type"
	}
	return fmt.Sprintf("%s; weft runs %q, %q and %q, every node of a cluster the same", why, BackendVXLAN, BackendHostGW, BackendWireGuard)
}

func (be *BackendConfig) setVXLAN(raw rawVXLAN) error {
	if raw.VNI != nil {
		if *raw.VNI < 0 || *raw.VNI > MaxVNI {
			return configErr("Backend.VNI", fmt.Sprint(*raw.VNI), "must be between 0 and %d", MaxVNI)
		}
		v := uint32(*raw.VNI)
		be.VNI = &v
	}
	if raw.Port != nil {
		if *raw.Port < 0 || *raw.Port > 65535 {
			return configErr("Backend.Port", fmt.Sprint(*raw.Port), "not a UDP port (0 for the default)")
		}
		be.Port = uint16(*raw.Port)
	}
	if raw.MTU != nil {
		// Backend.MTU is the underlay's (flanneld's meaning): the overlay gets 50 bytes less,
		// and below 68 not even IPv4 works.
		if *raw.MTU != 0 && (*raw.MTU < 118 || *raw.MTU > 65535) {
			return configErr("Backend.MTU", fmt.Sprint(*raw.MTU), "must be between 118 and 65535 (the underlay MTU, VXLAN takes 50; 0 for the interface's)")
		}
		be.MTU = int(*raw.MTU)
	}
	be.GBP = deref(raw.GBP)
	be.Learning = deref(raw.Learning)
	be.DirectRouting = deref(raw.DirectRouting)
	be.MacPrefix = deref(raw.MacPrefix)
	if be.MacPrefix != "" && !validMacPrefix(be.MacPrefix) {
		return configErr("Backend.MacPrefix", be.MacPrefix, `must be two hex bytes such as "0E-2A"`)
	}
	be.Name = deref(raw.Name)
	return nil
}

func (be *BackendConfig) setWireGuard(raw rawWireGuard) error {
	be.Mode = WGSeparate
	if raw.Mode != nil {
		// flanneld compares the mode as written: "Auto" stops it ("no valid Mode configured").
		switch m := *raw.Mode; m {
		case WGSeparate, WGAuto, WGIPv4, WGIPv6:
			be.Mode = m
		default:
			return configErr("Backend.Mode", m, "must be %q, %q, %q or %q (flanneld's modes, lower case)", WGSeparate, WGAuto, WGIPv4, WGIPv6)
		}
	}
	port := func(key string, v *int64, def uint16) (uint16, error) {
		if v == nil {
			return def, nil
		}
		// flanneld takes 0 as "any port" and then publishes 0, which its peers read as their
		// own port: no peer could reach the node.
		if *v < 1 || *v > 65535 {
			return 0, configErr(key, fmt.Sprint(*v), "not a UDP port from 1 to 65535 (the peers dial the port the lease publishes)")
		}
		return uint16(*v), nil
	}
	var err error
	if be.ListenPort, err = port("Backend.ListenPort", raw.ListenPort, DefaultWGListenPort); err != nil {
		return err
	}
	if be.ListenPortV6, err = port("Backend.ListenPortV6", raw.ListenPortV6, DefaultWGListenPortV6); err != nil {
		return err
	}
	if raw.MTU != nil {
		// The underlay's, as flanneld reads it: WireGuard takes 80 bytes, and IPv4 needs 68.
		if *raw.MTU != 0 && (*raw.MTU < 148 || *raw.MTU > 65535) {
			return configErr("Backend.MTU", fmt.Sprint(*raw.MTU), "must be between 148 and 65535 (the underlay MTU, WireGuard takes 80; 0 for the interface's)")
		}
		be.MTU = int(*raw.MTU)
	}
	if raw.PSK != nil && *raw.PSK != "" {
		if k, err := base64.StdEncoding.DecodeString(*raw.PSK); err != nil || len(k) != 32 {
			// The value is a secret: the error does not repeat it.
			return configErr("Backend.PSK", "", "not a WireGuard key (32 bytes in base64, as wg genpsk writes it)")
		}
		be.PSK = *raw.PSK
	}
	if v := raw.PersistentKeepaliveInterval; v != nil {
		if *v < 0 || *v > 65535 {
			return configErr("Backend.PersistentKeepaliveInterval", fmt.Sprint(*v), "must be between 0 and 65535 seconds (0: no keepalives)")
		}
		be.PersistentKeepalive = time.Duration(*v) * time.Second
	}
	return nil
}

func (be *BackendConfig) setHostGW(raw rawHostGW) error {
	be.Name = deref(raw.Name)
	be.DNSServerList = deref(raw.DNSServerList)
	for _, s := range strings.Split(be.DNSServerList, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if _, err := netip.ParseAddr(s); err != nil {
			return configErr("Backend.DNSServerList", be.DNSServerList, "%q is not an IP address", s)
		}
	}
	return nil
}

// decode decodes the JSON object data into the struct v as flanneld decodes net-conf.json:
// encoding/json's Unmarshal, which matches key names to field names case-insensitively and
// lets the last of duplicate keys win. It returns the keys that name no field of v nor one of
// known, prefixed with keyPrefix and sorted: flanneld ignores them. Errors are ConfigErrors
// naming the key where there is one.
func decode(data []byte, v any, keyPrefix string, known ...string) ([]string, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil || keys == nil {
		var typeErr *json.UnmarshalTypeError
		var syntaxErr *json.SyntaxError
		what := "null"
		switch {
		case errors.As(err, &syntaxErr):
			return nil, fmt.Errorf("net-conf.json: invalid JSON at byte %d: %w", syntaxErr.Offset, err)
		case errors.As(err, &typeErr):
			what = typeErr.Value
		case err != nil:
			return nil, fmt.Errorf("net-conf.json: %w", err)
		}
		if keyPrefix == "" {
			return nil, fmt.Errorf("net-conf.json: must be a JSON object, not JSON %s", what)
		}
		return nil, configErr(strings.TrimSuffix(keyPrefix, "."), "", "must be a JSON object, not JSON %s", what)
	}
	if err := json.Unmarshal(data, v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return nil, configErr(keyPrefix+typeErr.Field, "", "wrong type: a JSON %s cannot be a %s", typeErr.Value, typeErr.Type)
		}
		return nil, fmt.Errorf("net-conf.json: %s: %w", strings.TrimSuffix(keyPrefix, "."), err)
	}
	t := reflect.TypeOf(v).Elem()
	for i := range t.NumField() {
		known = append(known, t.Field(i).Name)
	}
	var ignored []string
	for k := range keys {
		if !slices.ContainsFunc(known, func(f string) bool { return strings.EqualFold(k, f) }) {
			ignored = append(ignored, keyPrefix+k)
		}
	}
	slices.Sort(ignored)
	return ignored, nil
}

func isJSONNull(b []byte) bool { return string(bytes.TrimSpace(b)) == "null" }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func validMacPrefix(s string) bool {
	if len(s) != 5 || (s[2] != '-' && s[2] != ':') {
		return false
	}
	for _, i := range []int{0, 1, 3, 4} {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

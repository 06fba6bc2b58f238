package subnet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
)

// Backend types weft implements.
const (
	BackendVXLAN  = "vxlan"
	BackendHostGW = "host-gw"
)

// VXLAN limits and the Windows rules (HNS accepts only VNI >= 4096 on UDP port 4789).
const (
	MaxVNI            = 1<<24 - 1
	DefaultVNILinux   = 1
	DefaultVNIWindows = 4096
	WindowsVXLANPort  = 4789
	MaxVNIWindows     = 1<<16 - 1
)

// maxSubnetBits bounds how many subnets a network may hold (2^62), so that subnet indexes
// fit in 64 bits. Only IPv6 can reach it, with tiny subnets in a huge network.
const maxSubnetBits = 62

// Config is the network configuration, validated, with flannel's defaults applied.
type Config struct {
	EnableIPv4     bool
	EnableIPv6     bool
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
}

// BackendConfig holds the keys of the Backend object. Which keys are accepted depends on Type.
type BackendConfig struct {
	Type string

	// vxlan
	VNI           *uint32 // nil: the OS default (see VNIFor)
	Port          uint16  // 0: the kernel default (8472) on Linux, 4789 on Windows
	MTU           int     // 0: derived from the external interface
	GBP           bool
	Learning      bool
	DirectRouting bool
	MacPrefix     string // Windows remote endpoint MAC prefix, "0E-2A" form

	// Windows
	Name          string // HNS network name
	DNSServerList string // host-gw on Windows
}

// VNIFor returns the configured VNI, or the default of goos ("windows" or anything else).
func (b BackendConfig) VNIFor(goos string) uint32 {
	if b.VNI != nil {
		return *b.VNI
	}
	if goos == "windows" {
		return DefaultVNIWindows
	}
	return DefaultVNILinux
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

// rawConfig mirrors net-conf.json; pointers tell absent keys from zero values.
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
	Networks       json.RawMessage
	IPv6Networks   json.RawMessage
	Backend        json.RawMessage
}

type rawBackend struct {
	Type          *string
	VNI           *int64
	Port          *int64
	MTU           *int64
	GBP           *bool
	Learning      *bool
	DirectRouting *bool
	MacPrefix     *string
	Name          *string
	DNSServerList *string
}

// keys each backend type accepts besides Type.
var backendKeys = map[string][]string{
	BackendVXLAN:  {"VNI", "Port", "MTU", "GBP", "Learning", "DirectRouting", "MacPrefix", "Name"},
	BackendHostGW: {"Name", "DNSServerList"},
}

// ParseConfig decodes and validates net-conf.json. Unknown keys, values of the wrong type and
// values weft cannot use are refused with a *ConfigError naming the key and the value.
func ParseConfig(data []byte) (*Config, error) {
	var raw rawConfig
	if err := strictDecode(data, &raw, ""); err != nil {
		return nil, err
	}
	if len(raw.Networks) > 0 && !isJSONNull(raw.Networks) {
		return nil, configErr("Networks", compact(raw.Networks), "several IPv4 networks are not supported; use Network")
	}
	if len(raw.IPv6Networks) > 0 && !isJSONNull(raw.IPv6Networks) {
		return nil, configErr("IPv6Networks", compact(raw.IPv6Networks), "several IPv6 networks are not supported; use IPv6Network")
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
	be, err := parseBackend(raw.Backend)
	if err != nil {
		return nil, err
	}
	cfg.Backend = be
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

func parseBackend(data json.RawMessage) (BackendConfig, error) {
	be := BackendConfig{Type: BackendVXLAN}
	if len(data) == 0 || isJSONNull(data) {
		return be, nil
	}
	var raw rawBackend
	if err := strictDecode(data, &raw, "Backend."); err != nil {
		return be, err
	}
	if raw.Type == nil || *raw.Type == "" {
		return be, configErr("Backend.Type", "", "missing; use %q or %q", BackendVXLAN, BackendHostGW)
	}
	be.Type = *raw.Type
	allowed, ok := backendKeys[be.Type]
	if !ok {
		return be, configErr("Backend.Type", *raw.Type, "not supported by weft; use %q or %q", BackendVXLAN, BackendHostGW)
	}
	present := map[string]bool{
		"VNI": raw.VNI != nil, "Port": raw.Port != nil, "MTU": raw.MTU != nil, "GBP": raw.GBP != nil,
		"Learning": raw.Learning != nil, "DirectRouting": raw.DirectRouting != nil,
		"MacPrefix": raw.MacPrefix != nil, "Name": raw.Name != nil, "DNSServerList": raw.DNSServerList != nil,
	}
	for _, k := range []string{"VNI", "Port", "MTU", "GBP", "Learning", "DirectRouting", "MacPrefix", "Name", "DNSServerList"} {
		if present[k] && !slices.Contains(allowed, k) {
			return be, configErr("Backend."+k, "", "not a key of the %s backend", be.Type)
		}
	}
	if raw.VNI != nil {
		if *raw.VNI < 0 || *raw.VNI > MaxVNI {
			return be, configErr("Backend.VNI", fmt.Sprint(*raw.VNI), "must be between 0 and %d", MaxVNI)
		}
		v := uint32(*raw.VNI)
		be.VNI = &v
	}
	if raw.Port != nil {
		if *raw.Port < 0 || *raw.Port > 65535 {
			return be, configErr("Backend.Port", fmt.Sprint(*raw.Port), "not a UDP port (0 for the default)")
		}
		be.Port = uint16(*raw.Port)
	}
	if raw.MTU != nil {
		// Backend.MTU is the underlay's (flanneld's meaning): the overlay gets 50 bytes less,
		// and below 68 not even IPv4 works.
		if *raw.MTU != 0 && (*raw.MTU < 118 || *raw.MTU > 65535) {
			return be, configErr("Backend.MTU", fmt.Sprint(*raw.MTU), "must be between 118 and 65535 (the underlay MTU, VXLAN takes 50; 0 for the interface's)")
		}
		be.MTU = int(*raw.MTU)
	}
	be.GBP = deref(raw.GBP)
	be.Learning = deref(raw.Learning)
	be.DirectRouting = deref(raw.DirectRouting)
	be.MacPrefix = deref(raw.MacPrefix)
	if be.MacPrefix != "" && !validMacPrefix(be.MacPrefix) {
		return be, configErr("Backend.MacPrefix", be.MacPrefix, `must be two hex bytes such as "0E-2A"`)
	}
	be.Name = deref(raw.Name)
	be.DNSServerList = deref(raw.DNSServerList)
	for _, s := range strings.Split(be.DNSServerList, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if _, err := netip.ParseAddr(s); err != nil {
			return be, configErr("Backend.DNSServerList", be.DNSServerList, "%q is not an IP address", s)
		}
	}
	return be, nil
}

// CheckFor refuses what the data plane of goos cannot do: HNS only takes VXLAN networks
// with VNI 4096 or more on UDP port 4789.
func (c *Config) CheckFor(goos string) error {
	if goos != "windows" || c.Backend.Type != BackendVXLAN {
		return nil
	}
	if vni := c.Backend.VNIFor(goos); vni < DefaultVNIWindows || vni > MaxVNIWindows {
		return configErr("Backend.VNI", fmt.Sprint(vni), "Windows needs a VNI from %d to %d (HNS keeps it in 16 bits)", DefaultVNIWindows, MaxVNIWindows)
	}
	if c.EnableIPv6 {
		return configErr("EnableIPv6", "true", "not available with vxlan on Windows: HNS Overlay networks cannot carry IPv6 between pods (host-gw, an L2Bridge network, can)")
	}
	if c.Backend.DirectRouting {
		return configErr("Backend.DirectRouting", "true", "not available on Windows: HNS overlay networks always encapsulate")
	}
	if c.Backend.GBP {
		return configErr("Backend.GBP", "true", "not available on Windows")
	}
	if p := c.Backend.Port; p != 0 && p != WindowsVXLANPort {
		return configErr("Backend.Port", fmt.Sprint(p), "Windows only carries VXLAN on UDP port %d", WindowsVXLANPort)
	}
	return nil
}

// strictDecode decodes one JSON object, refusing unknown keys and trailing data, and turns the
// decoder's errors into ConfigErrors that name the key.
func strictDecode(data []byte, v any, keyPrefix string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var syntaxErr *json.SyntaxError
		switch {
		case errors.As(err, &typeErr) && typeErr.Field != "":
			return configErr(keyPrefix+typeErr.Field, "", "wrong type: a JSON %s cannot be a %s", typeErr.Value, typeErr.Type)
		case errors.As(err, &typeErr) && keyPrefix == "":
			return fmt.Errorf("net-conf.json: must be a JSON object, not a %s", typeErr.Value)
		case errors.As(err, &typeErr):
			return configErr(strings.TrimSuffix(keyPrefix, "."), "", "must be a JSON object, not a %s", typeErr.Value)
		case errors.As(err, &syntaxErr):
			return fmt.Errorf("net-conf.json: invalid JSON at byte %d: %w", syntaxErr.Offset, err)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			if name == "" {
				name = `""` // the empty key, still named
			}
			return configErr(keyPrefix+name, "", "unknown key")
		}
		return fmt.Errorf("net-conf.json: %w", err)
	}
	// A second value or garbage after the object must not be ignored silently.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("net-conf.json: data after the %sobject", keyPrefix)
	}
	return nil
}

func isJSONNull(b []byte) bool { return string(bytes.TrimSpace(b)) == "null" }

func compact(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}

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

package subnet

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/weftnet/weft/internal/atomicfile"
)

// Keys of subnet.env, as written by flannel and read by the flannel CNI plugin.
const (
	envNetwork     = "FLANNEL_NETWORK"
	envSubnet      = "FLANNEL_SUBNET"
	envIPv6Network = "FLANNEL_IPV6_NETWORK"
	envIPv6Subnet  = "FLANNEL_IPV6_SUBNET"
	envMTU         = "FLANNEL_MTU"
	envIPMasq      = "FLANNEL_IPMASQ"
)

// DefaultEnvFile is where flanneld writes subnet.env and flannel's CNI plugin reads it.
const DefaultEnvFile = "/run/flannel/subnet.env"

// envFileMode is the mode of subnet.env: the CNI plugin, which may run as
// another user, must be able to read it.
const envFileMode = 0o644

// Env is the content of subnet.env.
type Env struct {
	Network     netip.Prefix // FLANNEL_NETWORK; invalid (zero) when IPv4 is disabled
	Subnet      netip.Prefix // FLANNEL_SUBNET: first usable address of the node subnet, with its length (10.244.1.1/24)
	IPv6Network netip.Prefix // FLANNEL_IPV6_NETWORK; invalid (zero) when IPv6 is disabled
	IPv6Subnet  netip.Prefix // FLANNEL_IPV6_SUBNET: first usable address of the node's IPv6 subnet, with its length
	MTU         int          // FLANNEL_MTU
	IPMasq      bool         // FLANNEL_IPMASQ
}

// NewEnv builds the Env for a node: network and ipv6Network are the cluster
// networks (either may be the zero Prefix for a disabled family), sn and sn6
// the node's subnets (masked prefixes, zero when disabled). The written
// FLANNEL_SUBNET is sn's address + 1 with sn's bits, and likewise for
// FLANNEL_IPV6_SUBNET.
func NewEnv(network, sn, ipv6Network, sn6 netip.Prefix, mtu int, ipMasq bool) Env {
	return Env{
		Network:     network,
		Subnet:      firstUsable(sn),
		IPv6Network: ipv6Network,
		IPv6Subnet:  firstUsable(sn6),
		MTU:         mtu,
		IPMasq:      ipMasq,
	}
}

// firstUsable returns the address after p's network address, with p's
// length; the zero Prefix if p is invalid.
func firstUsable(p netip.Prefix) netip.Prefix {
	if !p.IsValid() {
		return netip.Prefix{}
	}
	// PrefixFrom yields the zero Prefix if Next overflows.
	return netip.PrefixFrom(p.Masked().Addr().Next(), p.Bits())
}

// LeaseSubnets returns the node subnets the env names (Subnet.Masked(),
// IPv6Subnet.Masked()), the zero Prefix where absent.
func (e Env) LeaseSubnets() (sn, sn6 netip.Prefix) {
	return e.Subnet.Masked(), e.IPv6Subnet.Masked()
}

// Marshal renders the file content in flannel's order. Invalid (zero)
// prefixes are omitted; FLANNEL_MTU and FLANNEL_IPMASQ are always written.
func (e Env) Marshal() []byte {
	var b bytes.Buffer
	prefix := func(key string, p netip.Prefix) {
		if p.IsValid() {
			fmt.Fprintf(&b, "%s=%s\n", key, p)
		}
	}
	prefix(envNetwork, e.Network)
	prefix(envSubnet, e.Subnet)
	prefix(envIPv6Network, e.IPv6Network)
	prefix(envIPv6Subnet, e.IPv6Subnet)
	fmt.Fprintf(&b, "%s=%d\n", envMTU, e.MTU)
	fmt.Fprintf(&b, "%s=%t\n", envIPMasq, e.IPMasq)
	return b.Bytes()
}

// ParseEnv parses subnet.env content. Blank lines and lines starting with
// '#' are ignored and surrounding spaces are trimmed (from the line, the key
// and the value). Unknown keys are ignored for forward compatibility; a line
// without '=' is an error, as is a known key with a bad value, reported with
// its line number, key and value. FLANNEL_NETWORK and FLANNEL_SUBNET must be
// IPv4 prefixes, FLANNEL_IPV6_NETWORK and FLANNEL_IPV6_SUBNET IPv6 prefixes,
// FLANNEL_MTU a decimal in 0..65535 and FLANNEL_IPMASQ a boolean accepted by
// strconv.ParseBool. If a key repeats, the last one wins, as with a shell's
// source. Missing keys leave zero values.
func ParseEnv(data []byte) (Env, error) {
	var e Env
	for i, line := range strings.Split(string(data), "\n") {
		lineNo := i + 1
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			return Env{}, fmt.Errorf("subnet.env line %d: %q: missing '='", lineNo, line)
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		var err error
		switch key {
		case envNetwork:
			e.Network, err = parsePrefix(value, false)
		case envSubnet:
			e.Subnet, err = parsePrefix(value, false)
		case envIPv6Network:
			e.IPv6Network, err = parsePrefix(value, true)
		case envIPv6Subnet:
			e.IPv6Subnet, err = parsePrefix(value, true)
		case envMTU:
			var mtu uint64
			mtu, err = strconv.ParseUint(value, 10, 16)
			e.MTU = int(mtu)
		case envIPMasq:
			e.IPMasq, err = strconv.ParseBool(value)
		default:
			continue
		}
		if err != nil {
			return Env{}, fmt.Errorf("subnet.env line %d: %s=%q: %w", lineNo, key, value, err)
		}
	}
	return e, nil
}

// parsePrefix parses s as an IPv6 prefix if ipv6 is set, else as an IPv4 one.
func parsePrefix(s string, ipv6 bool) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if err := checkFamily(p, ipv6); err != nil {
		return netip.Prefix{}, err
	}
	return p, nil
}

// checkFamily reports an error if p is not of the address family asked for.
func checkFamily(p netip.Prefix, ipv6 bool) error {
	switch {
	case ipv6 && !p.Addr().Is6():
		return fmt.Errorf("%s is not an IPv6 prefix", p)
	case !ipv6 && !p.Addr().Is4():
		return fmt.Errorf("%s is not an IPv4 prefix", p)
	}
	return nil
}

// validate reports an error if e would be written as a file that ParseEnv
// (or the CNI plugin) rejects.
func (e Env) validate() error {
	for _, f := range []struct {
		key  string
		p    netip.Prefix
		ipv6 bool
	}{
		{envNetwork, e.Network, false},
		{envSubnet, e.Subnet, false},
		{envIPv6Network, e.IPv6Network, true},
		{envIPv6Subnet, e.IPv6Subnet, true},
	} {
		if !f.p.IsValid() {
			continue
		}
		if err := checkFamily(f.p, f.ipv6); err != nil {
			return fmt.Errorf("%s: %w", f.key, err)
		}
	}
	if e.MTU < 0 || e.MTU > 65535 {
		return fmt.Errorf("%s: %d out of range 0..65535", envMTU, e.MTU)
	}
	return nil
}

// ReadEnv reads and parses the subnet.env file at path. A missing file
// returns an error satisfying errors.Is(err, fs.ErrNotExist).
func ReadEnv(path string) (Env, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Env{}, fmt.Errorf("read subnet env: %w", err)
	}
	e, err := ParseEnv(data)
	if err != nil {
		return Env{}, fmt.Errorf("parse %s: %w", path, err)
	}
	return e, nil
}

// WriteEnv writes e to path atomically with mode 0644, so that the CNI
// plugin never sees a partially written file. It refuses to write an Env
// whose file ParseEnv would reject (a prefix of the wrong family, an MTU out
// of range).
func WriteEnv(path string, e Env) error {
	if err := e.validate(); err != nil {
		return fmt.Errorf("write subnet env %s: %w", path, err)
	}
	if err := atomicfile.Write(path, e.Marshal(), envFileMode); err != nil {
		return fmt.Errorf("write subnet env: %w", err)
	}
	return nil
}

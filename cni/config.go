package cni

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/weftnet/weft/subnet"
)

// Defaults of flannel's CNI plugin, kept so that its configurations and its stored delegate
// configurations stay valid.
const (
	DefaultSubnetFile = subnet.DefaultEnvFile
	DefaultDataDir    = "/var/lib/cni/flannel"
)

// Config is the plugin's network configuration. Its keys are those of flannel's CNI plugin;
// like flannel, it ignores keys it does not know (the runtime adds some, such as
// capabilities and args).
type Config struct {
	CNIVersion string // cniVersion
	Name       string // name: the network name, given to the delegate
	Type       string // type
	SubnetFile string // subnetFile: where weftd (or flanneld) writes subnet.env
	DataDir    string // dataDir: where each container's delegate configuration is kept

	// Delegate is the delegate object, every value verbatim: weft only adds the keys it
	// lacks. It may not hold "name" or "ipam", which weft sets.
	Delegate map[string]json.RawMessage
	// IPAM is the top-level ipam object, the base of the delegate's IPAM on Linux (flannel
	// ignores it on Windows); nil if absent.
	IPAM map[string]json.RawMessage
	// RuntimeConfig is the runtimeConfig object the runtime filled for the capabilities this
	// plugin's entry declares; it replaces the delegate's. Nil if absent.
	RuntimeConfig json.RawMessage
	// PrevResult is the prevResult of a CHECK (or DEL); nil if absent.
	PrevResult json.RawMessage
}

// configError is a network configuration error naming the key.
func configError(key, format string, args ...any) error {
	return &Error{Code: types.ErrInvalidNetworkConfig, Msg: "network config: " + key + ": " + fmt.Sprintf(format, args...)}
}

// ParseConfig parses the network configuration a runtime passes on stdin, fills in flannel's
// defaults (subnetFile, dataDir) and checks what flannel's plugin checks, and a little more,
// so that every configuration it accepts makes a delegate: name is a non-empty string;
// delegate, ipam and runtimeConfig are objects; delegate.type, if present, a non-empty
// string; delegate has no name or ipam; ipam.type is a string and ipam.routes a list of
// routes with a dst prefix. Errors are *Error with code types.ErrDecodingFailure (not JSON)
// or types.ErrInvalidNetworkConfig, naming the key.
func ParseConfig(data []byte) (Config, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return Config{}, &Error{Code: types.ErrDecodingFailure, Msg: "network config: not a JSON object", Err: err}
	}
	if top == nil {
		return Config{}, &Error{Code: types.ErrDecodingFailure, Msg: "network config: not a JSON object: null"}
	}
	c := Config{SubnetFile: DefaultSubnetFile, DataDir: DefaultDataDir}
	for _, f := range []struct {
		key string
		dst *string
	}{
		{"cniVersion", &c.CNIVersion},
		{"name", &c.Name},
		{"type", &c.Type},
		{"subnetFile", &c.SubnetFile},
		{"dataDir", &c.DataDir},
	} {
		if err := stringField(top, f.key, f.key, f.dst); err != nil {
			return Config{}, err
		}
	}
	if c.Name == "" {
		return Config{}, configError("name", "missing")
	}
	// An empty path would make flannel's plugin fail at the first file access; the default
	// is what such a configuration can only have meant.
	if c.SubnetFile == "" {
		c.SubnetFile = DefaultSubnetFile
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}

	var err error
	if c.Delegate, err = objectField(top, "delegate"); err != nil {
		return Config{}, err
	}
	if _, ok := c.Delegate["type"]; ok {
		var typ string
		if err := stringField(c.Delegate, "type", "delegate.type", &typ); err != nil {
			return Config{}, err
		}
		if typ == "" {
			return Config{}, configError("delegate.type", "empty")
		}
	}
	for _, key := range []string{"name", "ipam"} {
		if _, ok := c.Delegate[key]; ok {
			return Config{}, configError("delegate."+key, "must not be set: weft sets it")
		}
	}

	if c.IPAM, err = objectField(top, "ipam"); err != nil {
		return Config{}, err
	}
	var ipamType string
	if err := stringField(c.IPAM, "type", "ipam.type", &ipamType); err != nil {
		return Config{}, err
	}
	if _, ok := c.IPAM["type"]; ok && ipamType == "" {
		return Config{}, configError("ipam.type", "empty")
	}
	if _, err := ipamRoutes(c.IPAM); err != nil {
		return Config{}, err
	}

	rc, err := objectField(top, "runtimeConfig")
	if err != nil {
		return Config{}, err
	}
	if rc != nil {
		c.RuntimeConfig = top["runtimeConfig"]
	}
	if v, ok := top["prevResult"]; ok && !isNull(v) {
		c.PrevResult = v
	}
	return c, nil
}

// stringField sets *dst to the string at m[key], leaving it alone if the key is absent or
// null. name is the key's path for errors.
func stringField(m map[string]json.RawMessage, key, name string, dst *string) error {
	v, ok := m[key]
	if !ok || isNull(v) {
		return nil
	}
	if err := json.Unmarshal(v, dst); err != nil {
		return configError(name, "want a string, got %s", v)
	}
	return nil
}

// objectField returns the object at m[key], nil if absent or null.
func objectField(m map[string]json.RawMessage, key string) (map[string]json.RawMessage, error) {
	v, ok := m[key]
	if !ok || isNull(v) {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(v, &obj); err != nil {
		return nil, configError(key, "want an object, got %s", v)
	}
	return obj, nil
}

// ipamRoutes returns the routes of an ipam object, each verbatim. flannel keeps them and
// appends a route to the cluster network; a route without a valid dst prefix would only
// fail later, in the delegate.
func ipamRoutes(ipam map[string]json.RawMessage) ([]json.RawMessage, error) {
	v, ok := ipam["routes"]
	if !ok || isNull(v) {
		return nil, nil
	}
	var routes []json.RawMessage
	if err := json.Unmarshal(v, &routes); err != nil {
		return nil, configError("ipam.routes", "want a list of routes, got %s", v)
	}
	for i, r := range routes {
		var route struct {
			Dst *string `json:"dst"`
		}
		if err := json.Unmarshal(r, &route); err != nil || route.Dst == nil {
			return nil, configError(fmt.Sprintf("ipam.routes[%d]", i), "want an object with a dst prefix, got %s", r)
		}
		if _, err := netip.ParsePrefix(*route.Dst); err != nil {
			return nil, configError(fmt.Sprintf("ipam.routes[%d].dst", i), "%v", err)
		}
	}
	return routes, nil
}

func isNull(v json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

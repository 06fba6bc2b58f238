package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows/hnsfile"
)

// Args are the parts of a CNI invocation the plugin uses.
type Args struct {
	ContainerID string // CNI_CONTAINERID
	Netns       string // CNI_NETNS
	StdinData   []byte // the network configuration
}

// Delegator runs delegate plugins: conf is the delegate's network configuration, and the
// rest of the invocation (container, namespace, interface, CNI_PATH) is this one's.
type Delegator interface {
	Add(ctx context.Context, plugin string, conf []byte) (types.Result, error)
	Check(ctx context.Context, plugin string, conf []byte) error
	Del(ctx context.Context, plugin string, conf []byte) error
}

// Plugin carries out the CNI commands.
type Plugin struct {
	OS        OS
	Delegator Delegator
	// Log gets what helps to debug a pod's network, such as the delegate configuration
	// (runtimes log a plugin's stderr). Nil discards it.
	Log io.Writer
}

// Add builds the delegate configuration from subnet.env, keeps it for the container and runs
// the delegate's ADD, whose result it returns.
func (p *Plugin) Add(ctx context.Context, args Args) (types.Result, error) {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return nil, err
	}
	id, err := storeID(p.OS, args.ContainerID, args.Netns)
	if err != nil {
		return nil, err
	}
	env, err := ReadEnv(conf.SubnetFile)
	if err != nil {
		return nil, err
	}
	var hns hnsfile.Network
	if p.OS == Windows {
		if hns, err = ReadHNSNetwork(conf.SubnetFile); err != nil {
			return nil, err
		}
	}
	d, err := BuildDelegate(p.OS, conf, env, hns)
	if err != nil {
		return nil, err
	}
	if p.OS == Windows {
		if err := checkAPIVersion(d, args.Netns); err != nil {
			return nil, err
		}
	}
	p.logf("weft: ADD %s: delegate %s: %s\n", id, d.Type, d.Config)
	// Kept before the delegate runs: if it fails half-way, the runtime's DEL must find what
	// to undo.
	if err := saveDelegate(conf.DataDir, id, d.Config); err != nil {
		return nil, err
	}
	res, err := p.Delegator.Add(ctx, d.Type, d.Config)
	if err != nil {
		return nil, delegateError(d.Type, "ADD", err)
	}
	return res, nil
}

// Check runs the delegate's CHECK with the configuration kept at ADD, after making sure that
// subnet.env still gives the node the subnet the container's address came from.
func (p *Plugin) Check(ctx context.Context, args Args) error {
	conf, id, stored, err := p.kept(args)
	if errors.Is(err, fs.ErrNotExist) {
		return &Error{Code: types.ErrUnknownContainer,
			Msg: fmt.Sprintf("container %s: no delegate config in %s (not added on this node by weft or flannel)", id, conf.DataDir)}
	}
	if err != nil {
		return err
	}
	sd, err := parseStored(stored)
	if err != nil {
		return &Error{Code: types.ErrDecodingFailure, Msg: "container " + id + ": " + filepath.Join(conf.DataDir, id), Err: err}
	}
	env, err := ReadEnv(conf.SubnetFile)
	if err != nil {
		return err
	}
	now := []netip.Prefix{env.Subnet.Masked(), env.IPv6Subnet.Masked()}
	for _, sn := range sd.Subnets {
		// A subnet added since (IPv6 turned on) leaves the container's addresses valid.
		if !slices.Contains(now, sn) {
			return &Error{Code: CodeSubnetChanged,
				Msg: fmt.Sprintf("container %s has its address from the node subnet %s, but subnet.env %s now gives %s: weftd leased another subnet; the pod must be recreated",
					id, sn, conf.SubnetFile, envSubnets(env))}
		}
	}
	checkConf, err := withPrevResult(stored, conf)
	if err != nil {
		return &Error{Code: types.ErrDecodingFailure, Msg: "container " + id + ": " + filepath.Join(conf.DataDir, id), Err: err}
	}
	if err := p.Delegator.Check(ctx, sd.Type, checkConf); err != nil {
		return delegateError(sd.Type, "CHECK", err)
	}
	return nil
}

// Del runs the delegate's DEL with the configuration kept at ADD, so that it needs no
// subnet.env and undoes exactly what ADD did, then forgets it. A container without one was
// never added or is deleted already: that is success, as the CNI spec wants.
func (p *Plugin) Del(ctx context.Context, args Args) error {
	conf, id, stored, err := p.kept(args)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	sd, err := parseStored(stored)
	if err != nil {
		// As flannel: a DEL that can never succeed would keep the pod from going away; what
		// the delegate made stays until the node reboots.
		p.logf("weft: DEL %s: %s: %v; nothing deleted\n", id, filepath.Join(conf.DataDir, id), err)
		return nil
	}
	if err := p.Delegator.Del(ctx, sd.Type, stored); err != nil {
		return delegateError(sd.Type, "DEL", err)
	}
	return removeDelegate(conf.DataDir, id)
}

// kept reads the plugin config and the delegate config kept at ADD for the container; an
// error satisfying errors.Is(err, fs.ErrNotExist) means nothing was kept.
func (p *Plugin) kept(args Args) (conf Config, id string, stored []byte, err error) {
	if conf, err = ParseConfig(args.StdinData); err != nil {
		return Config{}, "", nil, err
	}
	if id, err = storeID(p.OS, args.ContainerID, args.Netns); err != nil {
		return Config{}, "", nil, err
	}
	stored, err = loadDelegate(conf.DataDir, id)
	return conf, id, stored, err
}

// Status reports whether pods can be added: an error with CodeNotAvailable while subnet.env
// (or, on Windows, hnsfile.NetworkFile) is missing or unusable.
func (p *Plugin) Status(_ context.Context, args Args) error {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	if _, err := ReadEnv(conf.SubnetFile); err != nil {
		return &Error{Code: CodeNotAvailable, Msg: "weft cannot add pods", Err: err}
	}
	if p.OS == Windows {
		if _, err := ReadHNSNetwork(conf.SubnetFile); err != nil {
			return &Error{Code: CodeNotAvailable, Msg: "weft cannot add pods", Err: err}
		}
	}
	return nil
}

// withPrevResult is the stored delegate configuration for a CHECK: with the runtime's
// prevResult, which the delegate checks against, in the runtime's cniVersion, which is
// that of the prevResult.
func withPrevResult(stored []byte, conf Config) ([]byte, error) {
	var d map[string]json.RawMessage
	if err := json.Unmarshal(stored, &d); err != nil {
		return nil, fmt.Errorf("parsing stored delegate config: %w", err)
	}
	if conf.PrevResult != nil {
		d["prevResult"] = conf.PrevResult
	}
	if conf.CNIVersion != "" {
		d["cniVersion"] = mustJSON(conf.CNIVersion)
	}
	data, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encoding delegate config for CHECK: %w", err)
	}
	return data, nil
}

// delegateError keeps the delegate's CNI error code, and says which delegate failed.
func delegateError(plugin, command string, err error) error {
	code := types.ErrInternal
	var te *types.Error
	if errors.As(err, &te) {
		code = te.Code
	}
	return &Error{Code: code, Msg: fmt.Sprintf("delegate %s %s", plugin, command), Err: err}
}

// envSubnets describes the node subnets of subnet.env, for messages.
func envSubnets(env subnet.Env) string {
	var s []string
	for _, sn := range []netip.Prefix{env.Subnet, env.IPv6Subnet} {
		if sn.IsValid() {
			s = append(s, sn.Masked().String())
		}
	}
	if len(s) == 0 {
		return "no subnet"
	}
	return strings.Join(s, " and ")
}

func (p *Plugin) logf(format string, args ...any) {
	if p.Log != nil {
		fmt.Fprintf(p.Log, format, args...)
	}
}

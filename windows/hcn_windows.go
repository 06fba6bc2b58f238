package windows

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/Microsoft/hcsshim/hcn"
)

// HCN is the Client of a real HNS: hcsshim's hcn package, which calls computenetwork.dll
// (and vmcompute.dll for the version). Objects cross between weft's model and hcn's types
// as JSON, which both write the same way (see hcn_windows_test.go).
type HCN struct{}

var _ Client = HCN{}

// NewHCN checks that HNS has the v2 API weft speaks (HNS 9.2, Windows Server 2019).
func NewHCN() (HCN, error) {
	if err := hcn.V2ApiSupported(); err != nil {
		return HCN{}, fmt.Errorf("HNS v2 API (Windows Server 2019 or later): %w", err)
	}
	return HCN{}, nil
}

// convert moves a value between weft's model and hcn's types through their common JSON.
func convert[T any](v any) (*T, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding %T: %w", v, err)
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("decoding %s into %T: %w", b, out, err)
	}
	return out, nil
}

// hnsErr wraps an hcn error so that callers can test it with errors.Is: not-found errors
// match ErrNotFound, a second attachment ErrExists.
func hnsErr(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf(format, args...)
	switch {
	case hcn.IsNotFoundError(err) || hcn.IsElementNotFoundError(err):
		return fmt.Errorf("%s: %w: %w", what, ErrNotFound, err)
	// hcn has no code for it; flanneld matches the message too.
	case strings.Contains(err.Error(), "already part of a network namespace") || strings.Contains(err.Error(), "already attached"):
		return fmt.Errorf("%s: %w: %w", what, ErrExists, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Version implements Client.
func (HCN) Version() (Version, error) {
	g, err := hcn.GetGlobals()
	if err != nil {
		return Version{}, hnsErr(err, "HNS version")
	}
	return Version{Major: g.Version.Major, Minor: g.Version.Minor}, nil
}

// NetworkByName implements Client.
func (HCN) NetworkByName(name string) (*HostComputeNetwork, error) {
	n, err := hcn.GetNetworkByName(name)
	if err != nil {
		return nil, hnsErr(err, "HNS network %q", name)
	}
	return convert[HostComputeNetwork](n)
}

// CreateNetwork implements Client.
func (HCN) CreateNetwork(n *HostComputeNetwork) (*HostComputeNetwork, error) {
	hn, err := convert[hcn.HostComputeNetwork](n)
	if err != nil {
		return nil, err
	}
	made, err := hn.Create()
	if err != nil {
		return nil, hnsErr(err, "creating HNS network %q", n.Name)
	}
	return convert[HostComputeNetwork](made)
}

// DeleteNetwork implements Client.
func (HCN) DeleteNetwork(id string) error {
	return hnsErr((&hcn.HostComputeNetwork{Id: id}).Delete(), "deleting HNS network %s", id)
}

// ModifyNetworkSettings implements Client.
func (HCN) ModifyNetworkSettings(networkID string, req *ModifyNetworkSettingRequest) error {
	r, err := convert[hcn.ModifyNetworkSettingRequest](req)
	if err != nil {
		return err
	}
	return hnsErr((&hcn.HostComputeNetwork{Id: networkID}).ModifyNetworkSettings(r), "modifying HNS network %s", networkID)
}

// NetworkEndpoints implements Client.
func (HCN) NetworkEndpoints(networkID string) ([]HostComputeEndpoint, error) {
	eps, err := hcn.ListEndpointsOfNetwork(networkID)
	if err != nil {
		return nil, hnsErr(err, "endpoints of HNS network %s", networkID)
	}
	out, err := convert[[]HostComputeEndpoint](eps)
	if err != nil {
		return nil, err
	}
	return *out, nil
}

// CreateEndpoint implements Client.
func (HCN) CreateEndpoint(ep *HostComputeEndpoint) (*HostComputeEndpoint, error) {
	he, err := convert[hcn.HostComputeEndpoint](ep)
	if err != nil {
		return nil, err
	}
	made, err := he.Create()
	if err != nil {
		return nil, hnsErr(err, "creating HNS endpoint %q", ep.Name)
	}
	return convert[HostComputeEndpoint](made)
}

// DeleteEndpoint implements Client.
func (HCN) DeleteEndpoint(id string) error {
	return hnsErr((&hcn.HostComputeEndpoint{Id: id}).Delete(), "deleting HNS endpoint %s", id)
}

// HostDefaultNamespace implements Client.
func (HCN) HostDefaultNamespace() (*HostComputeNamespace, error) {
	all, err := hcn.ListNamespaces()
	if err != nil {
		return nil, hnsErr(err, "listing HNS namespaces")
	}
	for i := range all {
		if all[i].Type == hcn.NamespaceTypeHostDefault {
			return convert[HostComputeNamespace](&all[i])
		}
	}
	return nil, fmt.Errorf("HNS host default namespace: %w", ErrNotFound)
}

// CreateNamespace implements Client.
func (HCN) CreateNamespace(ns *HostComputeNamespace) (*HostComputeNamespace, error) {
	hns, err := convert[hcn.HostComputeNamespace](ns)
	if err != nil {
		return nil, err
	}
	made, err := hns.Create()
	if err != nil {
		return nil, hnsErr(err, "creating HNS namespace %s", ns.Type)
	}
	return convert[HostComputeNamespace](made)
}

// ModifyNamespaceSettings implements Client.
func (HCN) ModifyNamespaceSettings(namespaceID string, req *ModifyNamespaceSettingRequest) error {
	r, err := convert[hcn.ModifyNamespaceSettingRequest](req)
	if err != nil {
		return err
	}
	return hnsErr(hcn.ModifyNamespaceSettings(namespaceID, r), "modifying HNS namespace %s", namespaceID)
}

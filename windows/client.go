package windows

import "errors"

// Client is the part of HNS the plane uses. The hcn adapter (Windows) and the in-memory HNS
// of hnstest implement it. Lookups of something that does not exist return an error matching
// ErrNotFound.
type Client interface {
	// Version is HNS's version; features depend on it (RemoteSubnetRoute from 9.2).
	Version() (Version, error)
	// NetworkByName returns the network called name.
	NetworkByName(name string) (*HostComputeNetwork, error)
	// CreateNetwork creates n and returns it as HNS reports it (ID, policies it added).
	CreateNetwork(n *HostComputeNetwork) (*HostComputeNetwork, error)
	DeleteNetwork(id string) error
	// ModifyNetworkSettings adds or removes network policies (see PolicyRequest).
	ModifyNetworkSettings(networkID string, req *ModifyNetworkSettingRequest) error
	// NetworkEndpoints lists the endpoints of a network, local and remote.
	NetworkEndpoints(networkID string) ([]HostComputeEndpoint, error)
	// CreateEndpoint creates ep on the network ep.HostComputeNetwork names.
	CreateEndpoint(ep *HostComputeEndpoint) (*HostComputeEndpoint, error)
	DeleteEndpoint(id string) error
	// ModifyEndpointSettings adds, removes or updates an endpoint's policies (see
	// EndpointPolicyRequest).
	ModifyEndpointSettings(endpointID string, req *ModifyEndpointSettingRequest) error
	// HostAttach attaches an endpoint to the host's own compartment, which gives the host a
	// vNIC holding the endpoint's addresses: HNS v1's attach (HostAttachRequest). An endpoint
	// attached already is an error matching ErrExists.
	HostAttach(endpointID string) error
}

// Errors that HNS's answers map to, for errors.Is.
var (
	// ErrNotFound: no network, endpoint, namespace or policy with that name or ID.
	ErrNotFound = errors.New("not found")
	// ErrExists: a network of that name, an endpoint with that address, a policy for that
	// destination already exists.
	ErrExists = errors.New("already exists")
	// ErrNotSupported: this HNS version does not have the feature.
	ErrNotSupported = errors.New("not supported by this HNS version")
	// ErrStopped: the HNS service is not running (stopped, or restarting); what weft
	// programmed in it may be gone when it is back.
	ErrStopped = errors.New("HNS is not running")
)

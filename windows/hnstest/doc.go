// Package hnstest is test support for the HNS data plane: HNS, an in-memory HNS that refuses
// what HNS refuses, answers with HNS's HRESULTs and error records (windows.Error), plays what
// HNS does to the host (the vSwitch, the blip, a reboot, a restart of the service), records
// every request and counts every call; and Host, an in-memory host IP stack.
//
// Only tests import it: weftd's production code talks to HNS through windows.Client, which
// the hcn adapter implements on Windows.
//
// # What it enforces, and where each rule comes from
//
// hcsshim is github.com/Microsoft/hcsshim v0.15.0; flannel is flannel-io/flannel's Windows
// backends (backend/vxlan/vxlan_windows.go, backend/hostgw/hostgw_windows.go). The codes are
// winerror.h's, as golang.org/x/sys/windows names them; which code HNS answers a given
// refusal with is verified only where a source is named.
//
//   - A subnet with an address prefix needs routes with a next hop, one of them a default
//     route: hcn refuses it before calling HNS, with its own error (hcsshim
//     hcn/hcnnetwork.go, createNetwork).
//   - An endpoint to create must not name a namespace: hcn refuses it (hcsshim
//     hcn/hcnendpoint.go, createEndpoint).
//   - A network looked up by a name no network has: hcn's own NetworkNotFoundError after an
//     empty listing (hcsshim hcn/hcnnetwork.go, GetNetworkByName).
//   - Attaching an endpoint to a namespace takes {"EndpointId": …} settings (hcsshim
//     hcn/hcnnamespace.go, AddNamespaceEndpoint); a namespace lists its endpoints as
//     {"ID": …} (NamespaceResourceEndpoint). Other settings: HCN_E_INVALID_JSON (the code is
//     unverified).
//   - A second attachment of an endpoint to a namespace fails with
//     HCN_E_ENDPOINT_NAMESPACE_ALREADY_EXISTS, "This requested operation is invalid as
//     endpoint is already part of a network namespace.": the code's text in Microsoft's HCN
//     error code table (learn.microsoft.com, virtualization/api/hcn/Reference/hcnhresult),
//     and the text terway's v2 host attachment matches (AliyunContainerService/terway
//     pkg/windows/apis/network_bridge.go, AddBridgeHCNNetwork). That HNS answers this code
//     here is unverified. (flannel v0.28.10's host-gw attaches through v1's HostAttach and
//     matches another code's text, HCN_E_ENDPOINT_ALREADY_ATTACHED's "This endpoint is
//     already attached to the switch." (pkg/backend/hostgw/hostgw_windows.go; flannel issue
//     1391, PR 1392), which Calico's log shows as 0x803b0014 (projectcalico/calico issue
//     4280).)
//   - HNS v1's host attachment (HostAttach: hcsshim internal/hns/hnsendpoint.go,
//     HNSEndpoint.HostAttach, {"SystemType":"Host","CompartmentId":1}, as flanneld's
//     host-gw and Microsoft's SDN scripts send it) puts the endpoint in the host's
//     HostDefault namespace, made if HNS has none, and the host gets its vNIC (that v1's
//     compartment 1 and that namespace are one place is unverified, as in hnssim). An
//     endpoint attached already answers HCN_E_ENDPOINT_ALREADY_ATTACHED with its text, which
//     flanneld matches.
//   - RemoteSubnetRoute and HostRoute policies need HNS 9.2 (hcsshim hcn/hcnglobals.go,
//     RemoteSubnetVersion, HostRouteVersion).
//   - An Overlay network gets a DR MAC (a DrMacAddress network policy) and reports its
//     ManagementIP only once the host vNIC is back after its creation (flannel's vxlan
//     waits for the management IP and publishes the DR MAC as the VtepMAC). The 00-15-5D
//     prefix is Hyper-V's MAC range.
//   - An Overlay subnet needs a VSID policy of 4096 or more (flannel refuses VNIs below
//     4096 on Windows). The code, HCN_E_INVALID_POLICY, is unverified.
//   - Networks made with EnableNonPersistent are gone after a reboot (hcsshim
//     hcn/hcnnetwork.go, NetworkFlags; flannel makes its networks so). That a restart of
//     the HNS service drops them too, and that a stopped HNS answers
//     HCN_E_MANAGER_STOPPED, are unverified.
//   - A network with an IPv6 subnet needs HNS 11.10 or later (hcsshim hcn/hcnglobals.go,
//     IPv6DualStackVersion; the code it answers with, HCN_E_INVALID_IP here, is unverified).
//   - Unknown network and endpoint IDs: HCN_E_NETWORK_NOT_FOUND, HCN_E_ENDPOINT_NOT_FOUND;
//     an unknown namespace: ERROR_NOT_FOUND. hcsshim's IsElementNotFoundError tests for the
//     latter; which object answers which code is unverified.
//   - A policy's type must be one hcsshim names for the object (hcn/hcnpolicy.go:
//     EndpointPolicyType, NetworkPolicyType, SubnetPolicyType), and one the HNS version has
//     (hcn/hcnglobals.go, whose ranges hcnsupport.go checks before a feature is used):
//     RemoteSubnetRoute and HostRoute from 9.2 (above), VxlanPort 10.3, SetPolicy 13.0 (a
//     NESTEDIPSET set 15.0), NetworkACL 15.0, a network's L4Proxy in L4ProxyPolicyVersion's
//     ranges; an endpoint's L4WFPPROXY 13.2, TierAcl 14.0, an ACL of protocol 252 11.0
//     (policy.go). Otherwise HCN_E_INVALID_POLICY_TYPE (unverified, as is refusing types
//     hcsshim does not name).
//   - A network takes RemoteSubnetRoute and HostRoute policies after its creation (flannel
//     adds them), and NetworkACL (hcsshim's TestAddRemoveNetworACLPolicy); SetPolicy and
//     L4Proxy too (unverified); other types: HCN_E_INVALID_POLICY_TYPE (unverified).
//   - The network types are hcsshim's (hcn/hcnnetwork.go, NetworkType): NAT, Transparent,
//     L2Bridge, L2Tunnel, ICS, Private, Overlay; others HCN_E_INVALID_NETWORK_TYPE. A NAT
//     network may have no subnet (hcsshim's TestCreateDeleteNetworks makes one).
//   - An endpoint made without an address gets one of each family its network has a
//     static subnet of: hcsshim's tests make every endpoint so (hcn/hcnutils_test.go,
//     HcnCreateTestEndpoint), and containernetworking/plugins v1.9.0's win-bridge without
//     an IPAM section sends one so (seen under Wine against this simulator). It is
//     the lowest address that is not the subnet's own, a gateway (a route's next hop),
//     IPv4's broadcast address or another endpoint's (which one HNS picks is unverified);
//     a network with none free: HCN_E_ADDR_INVALID_OR_RESERVED (unverified).
//   - Two PortMapping policies of a protocol, external port and VIP, on any endpoints:
//     HCN_E_PORT_ALREADY_EXISTS (hcsshim hcn/hcnerrors_test.go,
//     TestEndpointAlreadyExistsError, which wants that code; that the clash is host-wide,
//     not per network, is unverified).
//   - ModifyEndpoint (HcnModifyEndpoint, a policy request): Add adds policies (hcsshim's
//     TestAddL4WfpProxyPolicyOnEndpoint), Remove removes each by its JSON value
//     (HCN_E_POLICY_NOT_FOUND for one the endpoint lacks, unverified), Update puts the
//     request's policies in place of the endpoint's of the same types (hcsshim's
//     TestApplyPolicyOnEndpoint and TestModifyEndpointSettings update ACLs and read them
//     back; that policies of other types stay is unverified); version gates and port
//     clashes as at creation. Other request types: HCN_E_REQUEST_UNSUPPORTED (unverified).
//   - An endpoint's ACL policies: settings as hcsshim's AclPolicySetting has them, judged
//     by ACLAllows (default deny once an endpoint has any ACL, lower priority first); acl.go
//     gives each rule's source.
//   - A namespace made without a type is a Host namespace, and schema 0.0 (no version) is
//     taken: containerd makes its pods' namespaces as HostComputeNamespace{}
//     (pkg/netns/netns_windows.go). HNS's schema has its enums as strings over numbers
//     from 0 (Microsoft's "HCN JSON document schemas": a network's Type "NAT" (0), …), so
//     an absent one reads as the first; hcsshim lists the namespace types Host,
//     HostDefault, Guest, GuestDefault (hcn/hcnnamespace.go). That Host is HNS's first is
//     unverified. Other types: HCN_E_INVALID_JSON (unverified).
//   - DeleteNamespace (HcnDeleteNamespace, containerd's sandbox removal) detaches the
//     endpoints still attached (unverified); an unknown namespace: ERROR_NOT_FOUND.
//   - A create request may name the object's ID, which it keeps: hcsshim re-creates SDN
//     routes and load balancers under their old IDs (hcn/hcnroute.go, hcnloadbalancer.go)
//     and its tests then delete them by those IDs. That networks, endpoints and namespaces
//     keep a given ID too is unverified; an ID that is not a GUID: E_INVALIDARG, one in
//     use: HCN_E_NETWORK_ALREADY_EXISTS for a network, E_INVALIDARG otherwise (both
//     unverified).
//
// Unverified, each a guess at what HNS does that weft must survive either way:
//   - a second network of a name (HCN_E_NETWORK_ALREADY_EXISTS);
//   - a second RemoteSubnetRoute to a destination, a second HostRoute
//     (HCN_E_POLICY_ALREADY_EXISTS);
//   - removing a policy matches it by its JSON value, whatever the key order and spacing,
//     and removing one the network lacks fails (HCN_E_POLICY_NOT_FOUND);
//   - a local endpoint with an address outside the network's subnets (each address must lie
//     in the subnet of its family; HCN_E_INVALID_IP), a remote Overlay
//     endpoint without a ProviderAddress policy (HCN_E_INVALID_POLICY), two endpoints of an
//     address on a network (HCN_E_ADDR_INVALID_OR_RESERVED);
//   - a network or endpoint needs schema version 2.x, a namespace 2.x or none;
//   - a query answers with the subnets' policies (Options.QueryOmitsSubnetPolicies plays an
//     HNS that does not, as reported for some versions);
//   - the host sees a network's adapter move to a vSwitch vNIC "vEthernet (<adapter>)",
//     and an endpoint attached to the host namespace as a vNIC "vEthernet (<endpoint>)"
//     holding all of the endpoint's addresses (both families' on a dual-stack network);
//     forwarding is per interface and family, as MIB_IPINTERFACE_ROW has it.
package hnstest
